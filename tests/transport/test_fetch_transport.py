# Generated from tests/transport/test_async_fetch_transport.py by tools/gen_sync.py: do not edit.
"""FetchTransport against a local gRPC server (generated from test_async_fetch_transport.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import grpc
import pytest
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest

from xds_client._backends.threads import call_blocking
from xds_client.errors import TransportError, UsageError
from xds_client.resources import (
    CLUSTER,
    ENDPOINT,
    V2_LISTENER,
    VIRTUAL_HOST,
    resource_type,
)
from xds_client.transport import ServerTarget, Stream, StreamSpec
from xds_client.transport._fetch import FetchTransport
from xds_client.transport._polling import PollError

from ._poll_stubs import FAST, NODE, SPEC, StubFetchServer, cluster, pack
from ._stream_checks import close_while_receiving

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


def test_fetch_v3_same_version_gives_nothing_then_update(server: StubFetchServer) -> None:
    server.set(CLUSTER, "1", {"a": pack(cluster("a"))})
    target = ServerTarget(server.address, call_metadata=(("authorization", "Bearer t"),))
    transport = FetchTransport(target, policy=FAST)
    try:
        stream = transport.open(SPEC)
        assert isinstance(stream, Stream)
        stream.send(first())
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "1"
        stream.send(DiscoveryRequest(type_url=CLUSTER, version_info="1"))
        assert stream.recv(0.3) is None  # the server answers version 1 again: nothing new
        seen = call_blocking(server.wait_requests, 3)
        assert seen[0].path.endswith("/FetchClusters")
        assert seen[0].headers["authorization"] == "Bearer t"
        assert seen[-1].request.node.cluster == "c1"
        server.set(CLUSTER, "2", {"b": pack(cluster("b"))})
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "2"
    finally:
        transport.close()


def test_fetch_v2_sends_v3_messages_on_the_v2_path(server: StubFetchServer) -> None:
    v2_listener = resource_type(V2_LISTENER).message_class(name="l")
    server.set(V2_LISTENER, "5", {"l": pack(v2_listener)})
    transport = FetchTransport(server.address, policy=FAST)
    try:
        stream = transport.open(StreamSpec("", False, (V2_LISTENER,)))
        stream.send(first(V2_LISTENER))
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "5"
        assert response.resources[0].type_url == V2_LISTENER
        assert server.requests[0].path == "/envoy.api.v2.ListenerDiscoveryService/FetchListeners"
    finally:
        transport.close()


def test_unimplemented_fails_at_once_with_a_clear_message(server: StubFetchServer) -> None:
    transport = FetchTransport(server.address, policy=FAST)
    try:
        stream = transport.open(StreamSpec("", False, (ENDPOINT,)))
        stream.send(first(ENDPOINT))  # the stub serves no FetchEndpoints
        with pytest.raises(TransportError, match=r"UNIMPLEMENTED.*transport='grpc'") as info:
            stream.recv(5)
        assert isinstance(info.value, PollError)
        assert info.value.retryable is False
        assert isinstance(info.value.__cause__, grpc.RpcError)
    finally:
        transport.close()


def test_transient_status_is_retried_once_the_stream_worked(server: StubFetchServer) -> None:
    server.set(CLUSTER, "1", {})
    transport = FetchTransport(server.address, policy=FAST)
    try:
        stream = transport.open(SPEC)
        stream.send(first())
        assert stream.recv(5) is not None
        server.fail(grpc.StatusCode.UNAVAILABLE, count=2, body="restarting")
        server.set(CLUSTER, "2", {})
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "2"
        assert len(server.requests) == 4
    finally:
        transport.close()


@pytest.mark.parametrize(
    ("code", "body"),
    [(grpc.StatusCode.UNAVAILABLE, "starting"), (grpc.StatusCode.PERMISSION_DENIED, "who are you")],
)
def test_failure_before_any_success_fails_at_once(
    server: StubFetchServer, code: grpc.StatusCode, body: str
) -> None:
    server.fail(code, count=5, body=body)
    transport = FetchTransport(server.address, policy=FAST)
    try:
        stream = transport.open(SPEC)
        stream.send(first())
        with pytest.raises(TransportError, match=f"{code.name}: {body}"):
            stream.recv(5)
        assert len(server.requests) == 1  # the driver backs off and may fall back
    finally:
        transport.close()


def test_go_control_plane_skip_fetch_is_unchanged(server: StubFetchServer) -> None:
    server.set(CLUSTER, "1", {})
    server.fail(grpc.StatusCode.UNKNOWN, count=3, body="skip fetch: version up to date")
    transport = FetchTransport(server.address, policy=FAST)
    try:
        stream = transport.open(SPEC)
        stream.send(first())
        response = stream.recv(5)  # 3 "skip fetch" answers (not failures), then version 1
        assert response is not None
        assert response.version_info == "1"
        assert len(server.requests) == 4
        stream.send(DiscoveryRequest(type_url=CLUSTER, version_info="1"))
        assert stream.recv(0.3) is None
        assert len(server.requests) >= 3
    finally:
        transport.close()


def test_unreachable_server_fails_after_backoff() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    transport = FetchTransport(f"127.0.0.1:{port}", policy=FAST.with_request_timeout(0.5))
    try:
        stream = transport.open(SPEC)
        stream.send(first())
        with pytest.raises(TransportError, match=r"UNAVAILABLE|DEADLINE_EXCEEDED"):
            stream.recv(10)
    finally:
        transport.close()


def test_usage_errors(server: StubFetchServer) -> None:
    transport = FetchTransport(server.address, policy=FAST)
    with pytest.raises(UsageError, match="SotW only"):
        transport.open(StreamSpec("", True, (CLUSTER,)))
    with pytest.raises(UsageError, match="no unary Fetch"):
        transport.open(StreamSpec("", False, (VIRTUAL_HOST,)))
    transport.close()
    with pytest.raises(TransportError, match="closed"):
        transport.open(SPEC)


def test_errors_after_updates_and_usage_errors(server: StubFetchServer) -> None:
    server.set(CLUSTER, "1", {"a": pack(cluster("a"))})
    transport = FetchTransport(server.address, policy=FAST)
    try:
        stream = transport.open(SPEC)
        stream.send(first())
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "1"
        stream.send(DiscoveryRequest(type_url=CLUSTER, version_info="1"))
        assert stream.recv(0.2) is None
        server.set(CLUSTER, "2", {})
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "2"
        server.fail(grpc.StatusCode.UNIMPLEMENTED, count=1, body="not here")
        server.set(CLUSTER, "3", {})
        with pytest.raises(TransportError, match="UNIMPLEMENTED"):
            stream.recv(5)
        with pytest.raises(UsageError):
            transport.open(StreamSpec("", True, (CLUSTER,)))
    finally:
        transport.close()


def test_probe(server: StubFetchServer) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    live = FetchTransport(server.address)
    gone = FetchTransport(f"127.0.0.1:{dead}")
    try:
        assert live.probe(5) is True
        assert gone.probe(0.3) is False
    finally:
        live.close()
        gone.close()
    assert live.probe(0.3) is False  # closed


def test_close_cancels_a_fetch_in_flight(server: StubFetchServer) -> None:
    server.delay = 5.0
    transport = FetchTransport(server.address, policy=FAST.with_request_timeout(10))
    stream = transport.open(SPEC)
    stream.send(first())
    assert close_while_receiving(stream, transport.close, lambda: server.wait_requests(1)) < 2
