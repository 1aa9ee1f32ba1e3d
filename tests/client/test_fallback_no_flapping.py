"""gRFC A71 fallback without flapping, on both clients, against real gRPC servers.

A server counts as up only when its xDS stream delivers a response: a primary
whose health service answers but whose ADS stream fails must not take the client
away from a working fallback (before the fix: a switch back and a disconnect for
watchers every probe interval, 16 switches in 5 s).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from google.protobuf.duration_pb2 import Duration

from xds_client import Backoff, ConnectivityChanged, ResourceUpdated
from xds_client.testing import ControlPlane

from .conftest import ClientProxy, WatchProxy

MakeClient = Callable[..., ClientProxy]

# Fast enough that the old probe-driven switch flapped many times in the window.
BACKOFF = Backoff(initial=0.1, multiplier=1.5, jitter=0.0, maximum=0.3)


def cluster(name: str, seconds: int) -> Cluster:
    return Cluster(name=name, connect_timeout=Duration(seconds=seconds))


class BrokenAds:
    """A gRPC server whose health service answers but whose every xDS stream fails."""

    def __init__(self) -> None:
        self.attempts = 0
        self._lock = threading.Lock()
        self._server = grpc.server(ThreadPoolExecutor(4, thread_name_prefix="broken-ads"))
        self._server.add_generic_rpc_handlers([_Handler(self)])
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.stop(0).wait(5)


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, owner: BrokenAds) -> None:
        self._owner = owner

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        owner = self._owner
        if details.method == "/grpc.health.v1.Health/Check":

            def check(request: bytes, context: grpc.ServicerContext) -> bytes:
                return b"\x08\x01"  # HealthCheckResponse(status=SERVING)

            return grpc.unary_unary_rpc_method_handler(check, _raw, _raw)

        def stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            with owner._lock:
                owner.attempts += 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "ADS is broken here")
            yield b""  # pragma: no cover - abort raises

        return grpc.stream_stream_rpc_method_handler(stream, _raw, _raw)


def _raw(data: bytes) -> bytes:
    return data


def _drain(watch: WatchProxy, seconds: float) -> list[Any]:
    """Every event for ``seconds`` (bounded; an empty watch just waits the time out)."""
    events: list[Any] = []
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            events.append(watch.get(remaining))
        except Exception:  # WaitTimeoutError: nothing more within the window
            break
    return events


@pytest.fixture
def broken() -> Iterator[BrokenAds]:
    server = BrokenAds()
    yield server
    server.close()


def test_a_primary_whose_health_answers_but_ads_fails_gets_no_switch_back(
    broken: BrokenAds, make_client: MakeClient
) -> None:
    with ControlPlane(rest_port=None, heartbeat_interval=None) as secondary:
        secondary.set_resources(Cluster, {"a": cluster("a", 2)}, version="s1")
        client = make_client(
            [broken.address, secondary.address], backoff=BACKOFF, fallback_probe_interval=0.1
        )
        with client.watch(Cluster, "a") as watch:
            first = watch.next(ResourceUpdated, timeout=10)
            assert first.version == "s1"
            streams_before = len(secondary.streams())
            attempts_before = broken.attempts
            events = _drain(watch, 3.0)
            assert client.current_server() == secondary.address
        # The primary's ADS stream was tried again and again alongside the fallback ...
        assert broken.attempts - attempts_before >= 3
        # ... but the working fallback stream was never torn down, and watchers heard
        # of no disconnect (nor any other change).
        assert len(secondary.streams()) == streams_before == 1
        assert [e for e in events if isinstance(e, ConnectivityChanged)] == []
        assert events == []


def test_primary_recovery_switches_back_exactly_once(make_client: MakeClient) -> None:
    with (
        ControlPlane(rest_port=None, heartbeat_interval=None) as primary,
        ControlPlane(rest_port=None, heartbeat_interval=None) as secondary,
    ):
        primary.set_resources(Cluster, {"a": cluster("a", 1)}, version="p1")
        secondary.set_resources(Cluster, {"a": cluster("a", 2)}, version="s1")
        primary.fail_streams(count=None)  # answers, but every xDS stream fails
        client = make_client(
            [primary.address, secondary.address], backoff=BACKOFF, fallback_probe_interval=0.1
        )
        with client.watch(Cluster, "a") as watch:
            assert watch.next(ResourceUpdated, timeout=10).version == "s1"
            assert _drain(watch, 0.8) == []  # the primary is tried, nothing moves
            primary.clear_faults()
            back = watch.next(ResourceUpdated, where=lambda e: e.version == "p1", timeout=10)
            assert back.resource.connect_timeout.seconds == 1
            assert client.current_server() == primary.address
            secondary.wait_for_streams_closed(timeout=5)
            later = _drain(watch, 1.0)
            assert client.current_server() == primary.address
        assert later == []
        # One stream to the fallback for the whole test: one switch there, one back.
        assert len(secondary.streams()) == 1
        assert len(primary.streams(active=True)) <= 1
