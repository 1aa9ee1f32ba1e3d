"""gRFC A57 on the drivers: a does-not-exist timer starts only once its request is on
the wire of a stream the server serves, not when the request is queued.

Both clients, against servers that never let the request out or never serve it.
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
    """A gRPC server with one worker thread: the first stream takes it for good, so a
    second stream is accepted by HTTP/2 but its handler never runs."""

    def __init__(self) -> None:
        self.dispatched: list[str] = []
        self._release = threading.Event()
        self._server = grpc.server(ThreadPoolExecutor(1, thread_name_prefix="one-worker"))
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


def test_no_does_not_exist_on_a_per_type_stream_the_server_never_dispatched(
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
    assert len(one_worker.dispatched) == 1  # the endpoints stream never reached a handler
    assert [e for e in events if isinstance(e, ResourceDoesNotExist)] == []
