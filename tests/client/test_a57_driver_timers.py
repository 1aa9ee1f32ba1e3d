"""gRFC A57 on the drivers: a does-not-exist timer starts once its request is written
on the stream (as in gRPC C-core and grpc-go), not when the request is queued.

Both clients, against servers that never let the request out, refuse the stream, or
read the request and never answer.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse

from xds_client import ResourceDoesNotExist, ResourceUpdated
from xds_client.resources import CLUSTER

from ._scripted_server import ScriptedServer
from .conftest import ClientProxy, WatchProxy

MakeClient = Callable[..., ClientProxy]
TIMEOUT = 0.4  # does_not_exist_timeout: the window below is several times longer


class SilentTcp:
    """Accepts TCP connections and never says a word: HTTP/2 never starts."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.accepted.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self.accepted:
            conn.close()
        self._sock.close()


class OneWorker:
    """A gRPC server with one worker thread: the first stream takes it for good. It
    refuses a second stream (``maximum_concurrent_rpcs``, RESOURCE_EXHAUSTED) rather
    than admit it on HTTP/2 and never run its handler, as the ``ControlPlane`` does.
    (Admitted and never served, that stream's written request would time out: a
    client cannot tell it from a server that holds a request it has no answer for.)"""

    def __init__(self) -> None:
        self.dispatched: list[str] = []
        self._release = threading.Event()
        self._server = grpc.server(
            ThreadPoolExecutor(1, thread_name_prefix="one-worker"), maximum_concurrent_rpcs=1
        )
        self._server.add_generic_rpc_handlers([_Handler(self)])
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def close(self) -> None:
        self._release.set()
        self._server.stop(0).wait(5)


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, owner: OneWorker) -> None:
        self._owner = owner

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        owner = self._owner
        method: str = details.method
        if "DiscoveryService/" not in method:
            return None

        def serve(requests: Iterator[DiscoveryRequest], context: Any) -> Iterator[bytes]:
            owner.dispatched.append(method)
            first = next(requests)
            out = DiscoveryResponse(type_url=first.type_url, version_info="1", nonce="1")
            if first.type_url == CLUSTER:
                out.resources.add().Pack(Cluster(name="a"))
            yield out.SerializeToString()
            owner._release.wait(30)  # hold the only worker: nothing else is dispatched

        return grpc.stream_stream_rpc_method_handler(
            serve, request_deserializer=DiscoveryRequest.FromString, response_serializer=_raw
        )


def _raw(data: bytes) -> bytes:
    return data


def _events(watch: WatchProxy, seconds: float) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            out.append(watch.get(remaining))
        except Exception:  # nothing more within the window
            break
    return out


@pytest.fixture
def silent() -> Iterator[SilentTcp]:
    server = SilentTcp()
    yield server
    server.close()


@pytest.fixture
def one_worker() -> Iterator[OneWorker]:
    server = OneWorker()
    yield server
    server.close()


def test_no_does_not_exist_while_http2_never_starts(
    silent: SilentTcp, make_client: MakeClient
) -> None:
    client = make_client(f"127.0.0.1:{silent.port}", does_not_exist_timeout=TIMEOUT)
    with client.watch(Cluster, "a") as watch:
        events = _events(watch, TIMEOUT * 5)
    assert silent.accepted  # the client did connect at the TCP level
    assert [e for e in events if isinstance(e, ResourceDoesNotExist)] == []


def test_no_does_not_exist_on_a_per_type_stream_a_busy_server_refuses(
    one_worker: OneWorker, make_client: MakeClient
) -> None:
    client = make_client(
        f"127.0.0.1:{one_worker.port}", ads=False, does_not_exist_timeout=TIMEOUT,
        fallback_probe_interval=0.2,
    )  # fmt: skip
    with client.watch(Cluster, ["a", "gone"]) as clusters:
        assert clusters.next(ResourceUpdated).name == "a"
        # The dispatched stream's timers work: "gone" is reported missing.
        assert clusters.next(ResourceDoesNotExist).name == "gone"
        with client.watch(ClusterLoadAssignment, "e") as endpoints:
            events = _events(endpoints, TIMEOUT * 5)
    assert len(one_worker.dispatched) == 1  # the endpoints streams were refused, retried
    assert [e for e in events if isinstance(e, ResourceDoesNotExist)] == []


@pytest.mark.parametrize("ads", [True, False], ids=["ads", "per-type"])
def test_does_not_exist_fires_on_a_stream_the_server_reads_and_never_answers(
    make_client: MakeClient, ads: bool
) -> None:
    """#31: go-control-plane holds a request whose names it does not have, and a Go
    server sends no headers before its first message: the stream stays silent. The
    request was written and read, so its timer runs (as in gRPC C-core and grpc-go)."""
    with ScriptedServer(lambda stream, request: None) as server:
        client = make_client(server.address, ads=ads, does_not_exist_timeout=1.0)
        with client.watch(Cluster, "missing") as clusters:
            started = time.monotonic()
            assert clusters.next(ResourceDoesNotExist, 3.0).name == "missing"
        assert time.monotonic() - started >= 0.9  # the timer's, not sooner
        (stream,) = server.streams
        assert [list(r.resource_names) for r in stream.requests] == [["missing"]]
