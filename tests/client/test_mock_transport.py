"""The drivers on an in-memory transport (``xds_client.testing.MockTransport``): no sockets.

Every test runs on both clients (the ``mode`` fixture) with the matching transport.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse

from tests._waiting import wait_until
from xds_client import AsyncXdsClient, ConnectivityChanged, Node, ResourceUpdated, XdsClient
from xds_client.errors import UsageError
from xds_client.testing import AsyncMockTransport, MockStream, MockTransport

from .conftest import ClientProxy, Mode

pytestmark = pytest.mark.timeout(30)

MakeClient = Callable[..., ClientProxy]


def clusters(request: DiscoveryRequest, version: str, *names: str) -> DiscoveryResponse:
    response = DiscoveryResponse(type_url=request.type_url, version_info=version, nonce=version)
    for name in names:
        cluster = Cluster(name=name, alt_stat_name=version)  # a new version changes it
        response.resources.add().Pack(cluster)
    return response


def first_request_gets(version: str) -> Any:
    def handler(stream: MockStream, request: Any) -> DiscoveryResponse | None:
        if not request.response_nonce:
            return clusters(request, version, *request.resource_names)
        return None

    return handler


def sotw(stream: MockStream, index: int) -> DiscoveryRequest:
    request = stream.requests[index]
    assert isinstance(request, DiscoveryRequest)
    return request


def wait_for_ack(stream: MockStream, version: str) -> None:
    wait_until(
        lambda: any(r.response_nonce == version for r in stream.requests), 5, f"an ACK of {version}"
    )


def mock(mode: Mode, handler: Any) -> MockTransport | AsyncMockTransport:
    return MockTransport(handler) if mode == "sync" else AsyncMockTransport(handler)


def test_watch_ack_and_push(make_client: MakeClient, mode: Mode) -> None:
    transport = mock(mode, first_request_gets("1"))
    client = make_client("mock:1", transport=transport)
    with client.watch(Cluster, "c") as watch:
        assert watch.next(ResourceUpdated).version == "1"
        stream = transport.streams[0]
        first = sotw(stream, 0)
        assert list(first.resource_names) == ["c"]
        wait_for_ack(stream, "1")
        stream.push(clusters(first, "2", "c"))
        assert watch.next(ResourceUpdated).version == "2"
        wait_for_ack(stream, "2")
    assert sotw(stream, -1).version_info == "2"


def test_a_failed_stream_reconnects_with_the_last_version(
    make_client: MakeClient, mode: Mode
) -> None:
    transport = mock(mode, first_request_gets("7"))
    client = make_client("mock:1", transport=transport)
    with client.watch(Cluster, "c") as watch:
        watch.next(ResourceUpdated)
        transport.streams[0].fail("connection reset")
        wait_until(
            lambda: len(transport.streams) >= 2 and transport.streams[1].requests,
            5, "a second stream with a request",
        )  # fmt: skip
        # gRFC A57: a stream that fails after a response restarts at once and is not
        # reported to watchers as an outage.
        seen = [watch.get(1.0) for _ in range(watch.pending)]
        assert not any(isinstance(e, ConnectivityChanged) and not e.connected for e in seen)
    resumed = sotw(transport.streams[1], 0)
    assert resumed.version_info == "7"
    assert not resumed.response_nonce


def test_the_client_closes_the_transport_it_was_given(make_client: MakeClient, mode: Mode) -> None:
    transport = mock(mode, first_request_gets("1"))
    client = make_client("mock:1", transport=transport)
    with client.watch(Cluster, "c") as watch:
        watch.next(ResourceUpdated)
    client.close()
    assert transport.closed
    assert all(stream.closed for stream in transport.streams)


def test_a_transport_of_the_wrong_kind_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="needs a Transport"):
        XdsClient("mock:1", node=Node(id="n"), transport=AsyncMockTransport())
    with pytest.raises(UsageError, match="needs an AsyncTransport"):
        AsyncXdsClient("mock:1", node=Node(id="n"), transport=MockTransport())
    with pytest.raises(UsageError, match="open"):
        XdsClient("mock:1", node=Node(id="n"), transport=object())  # type: ignore[arg-type]


def test_the_testing_doc_example_runs_as_written() -> None:
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    section = doc.split("## Without sockets: `MockTransport`", 1)[1]
    example = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)[0]
    exec(compile(example, "docs/testing.md", "exec"), {})
