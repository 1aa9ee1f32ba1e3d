"""AsyncFetchTransport against a local gRPC server; ``tools/gen_sync.py`` makes the thread twin."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import grpc
import pytest
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest

from tests._twin_support import run_async  # async-only
from xds_client._backends.asyncio import call_blocking
from xds_client.errors import TransportError, UsageError
from xds_client.resources import (
    CLUSTER,
    ENDPOINT,
    V2_LISTENER,
    VIRTUAL_HOST,
    resource_type,
)
from xds_client.transport import AsyncStream, ServerTarget, StreamSpec
from xds_client.transport._async_fetch import AsyncFetchTransport
from xds_client.transport._fetch_common import fetch_method_for
from xds_client.transport._polling import PollError

from ._async_stream_checks import close_while_receiving
from ._poll_stubs import FAST, NODE, SPEC, StubFetchServer, cluster, pack

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def server() -> Iterator[StubFetchServer]:
    s = StubFetchServer([CLUSTER, V2_LISTENER])
    try:
        yield s
    finally:
        s.close()


def first(type_url: str = CLUSTER) -> DiscoveryRequest:
    return DiscoveryRequest(type_url=type_url, node=NODE)


# begin async-only
def test_fetch_methods_come_from_the_registry() -> None:
    assert fetch_method_for(CLUSTER) == (
        "/envoy.service.cluster.v3.ClusterDiscoveryService/FetchClusters"
    )
    assert fetch_method_for(V2_LISTENER) == "/envoy.api.v2.ListenerDiscoveryService/FetchListeners"
    with pytest.raises(UsageError, match="no unary Fetch"):
        fetch_method_for(VIRTUAL_HOST)


# end async-only


@run_async  # async-only
async def test_fetch_v3_same_version_gives_nothing_then_update(server: StubFetchServer) -> None:
    server.set(CLUSTER, "1", {"a": pack(cluster("a"))})
    target = ServerTarget(server.address, call_metadata=(("authorization", "Bearer t"),))
    transport = AsyncFetchTransport(target, policy=FAST)
    try:
        stream = await transport.open(SPEC)
        assert isinstance(stream, AsyncStream)
        await stream.send(first())
        response = await stream.recv(5)
        assert response is not None
        assert response.version_info == "1"
        await stream.send(DiscoveryRequest(type_url=CLUSTER, version_info="1"))
        assert await stream.recv(0.3) is None  # the server answers version 1 again: nothing new
        seen = await call_blocking(server.wait_requests, 3)
        assert seen[0].path.endswith("/FetchClusters")
        assert seen[0].headers["authorization"] == "Bearer t"
        assert seen[-1].request.node.cluster == "c1"
        server.set(CLUSTER, "2", {"b": pack(cluster("b"))})
        response = await stream.recv(5)
        assert response is not None
        assert response.version_info == "2"
    finally:
        await transport.close()


@run_async  # async-only
async def test_fetch_v2_sends_v3_messages_on_the_v2_path(server: StubFetchServer) -> None:
    v2_listener = resource_type(V2_LISTENER).message_class(name="l")
    server.set(V2_LISTENER, "5", {"l": pack(v2_listener)})
    transport = AsyncFetchTransport(server.address, policy=FAST)
    try:
        stream = await transport.open(StreamSpec("", False, (V2_LISTENER,)))
        await stream.send(first(V2_LISTENER))
        response = await stream.recv(5)
        assert response is not None
        assert response.version_info == "5"
        assert response.resources[0].type_url == V2_LISTENER
        assert server.requests[0].path == "/envoy.api.v2.ListenerDiscoveryService/FetchListeners"
    finally:
        await transport.close()


@run_async  # async-only
async def test_unimplemented_fails_at_once_with_a_clear_message(server: StubFetchServer) -> None:
    transport = AsyncFetchTransport(server.address, policy=FAST)
    try:
        stream = await transport.open(StreamSpec("", False, (ENDPOINT,)))
        await stream.send(first(ENDPOINT))  # the stub serves no FetchEndpoints
        with pytest.raises(TransportError, match=r"UNIMPLEMENTED.*transport='grpc'") as info:
            await stream.recv(5)
        assert isinstance(info.value, PollError)
        assert info.value.retryable is False
        assert isinstance(info.value.__cause__, grpc.RpcError)
    finally:
        await transport.close()


@run_async  # async-only
async def test_transient_status_is_retried_once_the_stream_worked(server: StubFetchServer) -> None:
    server.set(CLUSTER, "1", {})
    transport = AsyncFetchTransport(server.address, policy=FAST)
    try:
        stream = await transport.open(SPEC)
        await stream.send(first())
        assert await stream.recv(5) is not None
        server.fail(grpc.StatusCode.UNAVAILABLE, count=2, body="restarting")
        server.set(CLUSTER, "2", {})
        response = await stream.recv(5)
        assert response is not None
        assert response.version_info == "2"
        assert len(server.requests) == 4
    finally:
        await transport.close()


@pytest.mark.parametrize(
    ("code", "body"),
    [(grpc.StatusCode.UNAVAILABLE, "starting"), (grpc.StatusCode.PERMISSION_DENIED, "who are you")],
)
@run_async  # async-only
async def test_failure_before_any_success_fails_at_once(
    server: StubFetchServer, code: grpc.StatusCode, body: str
) -> None:
    server.fail(code, count=5, body=body)
    transport = AsyncFetchTransport(server.address, policy=FAST)
    try:
        stream = await transport.open(SPEC)
        await stream.send(first())
        with pytest.raises(TransportError, match=f"{code.name}: {body}"):
            await stream.recv(5)
        assert len(server.requests) == 1  # the driver backs off and may fall back
    finally:
        await transport.close()


@run_async  # async-only
async def test_go_control_plane_skip_fetch_is_unchanged(server: StubFetchServer) -> None:
    server.set(CLUSTER, "1", {})
    server.fail(grpc.StatusCode.UNKNOWN, count=3, body="skip fetch: version up to date")
    transport = AsyncFetchTransport(server.address, policy=FAST)
    try:
        stream = await transport.open(SPEC)
        await stream.send(first())
        response = await stream.recv(5)  # 3 "skip fetch" answers (not failures), then version 1
        assert response is not None
        assert response.version_info == "1"
        assert len(server.requests) == 4
        await stream.send(DiscoveryRequest(type_url=CLUSTER, version_info="1"))
        assert await stream.recv(0.3) is None
        assert len(server.requests) >= 3
    finally:
        await transport.close()


@run_async  # async-only
async def test_unreachable_server_fails_after_backoff() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    transport = AsyncFetchTransport(f"127.0.0.1:{port}", policy=FAST.with_request_timeout(0.5))
    try:
        stream = await transport.open(SPEC)
        await stream.send(first())
        with pytest.raises(TransportError, match=r"UNAVAILABLE|DEADLINE_EXCEEDED"):
            await stream.recv(10)
    finally:
        await transport.close()


@run_async  # async-only
async def test_usage_errors(server: StubFetchServer) -> None:
    transport = AsyncFetchTransport(server.address, policy=FAST)
    with pytest.raises(UsageError, match="SotW only"):
        await transport.open(StreamSpec("", True, (CLUSTER,)))
    with pytest.raises(UsageError, match="no unary Fetch"):
        await transport.open(StreamSpec("", False, (VIRTUAL_HOST,)))
    await transport.close()
    with pytest.raises(TransportError, match="closed"):
        await transport.open(SPEC)


@run_async  # async-only
async def test_errors_after_updates_and_usage_errors(server: StubFetchServer) -> None:
    server.set(CLUSTER, "1", {"a": pack(cluster("a"))})
    transport = AsyncFetchTransport(server.address, policy=FAST)
    try:
        stream = await transport.open(SPEC)
        await stream.send(first())
        response = await stream.recv(5)
        assert response is not None
        assert response.version_info == "1"
        await stream.send(DiscoveryRequest(type_url=CLUSTER, version_info="1"))
        assert await stream.recv(0.2) is None
        server.set(CLUSTER, "2", {})
        response = await stream.recv(5)
        assert response is not None
        assert response.version_info == "2"
        server.fail(grpc.StatusCode.UNIMPLEMENTED, count=1, body="not here")
        server.set(CLUSTER, "3", {})
        with pytest.raises(TransportError, match="UNIMPLEMENTED"):
            await stream.recv(5)
        with pytest.raises(UsageError):
            await transport.open(StreamSpec("", True, (CLUSTER,)))
    finally:
        await transport.close()


@run_async  # async-only
async def test_probe(server: StubFetchServer) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    live = AsyncFetchTransport(server.address)
    gone = AsyncFetchTransport(f"127.0.0.1:{dead}")
    try:
        assert await live.probe(5) is True
        assert await gone.probe(0.3) is False
    finally:
        await live.close()
        await gone.close()
    assert await live.probe(0.3) is False  # closed


@run_async  # async-only
async def test_close_cancels_a_fetch_in_flight(server: StubFetchServer) -> None:
    server.delay = 5.0
    transport = AsyncFetchTransport(server.address, policy=FAST.with_request_timeout(10))
    stream = await transport.open(SPEC)
    await stream.send(first())
    assert await close_while_receiving(stream, transport.close, lambda: server.wait_requests(1)) < 2
