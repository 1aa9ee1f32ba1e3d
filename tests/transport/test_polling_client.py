"""XdsClient and AsyncXdsClient over the polling transports, against the test ControlPlane."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from typing import Literal, TypeVar

import pytest
import trustme
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest
from google.protobuf.message import Message
from tenacity import wait_fixed

from xds_client import (
    AsyncXdsClient,
    Backoff,
    ConnectivityChanged,
    Node,
    ResourceUpdated,
    UsageError,
    WaitTimeoutError,
    Watch,
    XdsClient,
)
from xds_client.resources import CLUSTER, V2_CLUSTER
from xds_client.testing import ControlPlane
from xds_client.transport import ChannelCredentialsConfig, TransportKind

from ._poll_stubs import StubRestServer, cluster, pack, tls_server_context

pytestmark = pytest.mark.timeout(60)

NODE = Node("poller", cluster="edge")
T = TypeVar("T")
CASES: list[tuple[TransportKind, Literal["v2", "v3"]]] = [
    ("rest", "v3"),
    ("rest", "v2"),
    ("grpc-fetch", "v3"),
    ("grpc-fetch", "v2"),
]


@pytest.fixture
def cp() -> Iterator[ControlPlane]:
    with ControlPlane(heartbeat_interval=None) as plane:
        yield plane


def server_of(cp: ControlPlane, transport: str) -> str:
    return cp.rest_url if transport == "rest" else cp.address


def polls(cp: ControlPlane, type_url: str) -> list[DiscoveryRequest]:
    return [r.message for r in cp.requests(type_url) if isinstance(r.message, DiscoveryRequest)]


@pytest.mark.parametrize(("transport", "api"), CASES)
def test_watch_update_and_nack(
    cp: ControlPlane, transport: TransportKind, api: Literal["v2", "v3"]
) -> None:
    type_url = V2_CLUSTER if api == "v2" else CLUSTER
    cp.set_resources(type_url, [Cluster(name="a")], version="1")

    def no_static(message: Message) -> None:
        if getattr(message, "alt_stat_name", "") == "bad":
            raise ValueError("cluster marked bad")

    with (
        XdsClient(
            server_of(cp, transport),
            transport=transport,
            api_version=api,
            poll_interval=0.1,
            node=NODE,
            validators={"cds": no_static},
        ) as client,
        client.watch("cds", "a"),  # keeps the subscription between the waits
    ):
        first = client.wait_for("cds", "a", timeout=10)
        assert getattr(first, "name", None) == "a"
        cp.set_resources(type_url, [Cluster(name="a", type=Cluster.EDS)], version="2")
        client.wait_for("cds", "a", version="2", timeout=10)
        # Every poll carries the node and the accepted version.
        cp.wait_for_request(
            type_url, lambda r: getattr(r.message, "version_info", "") == "2", timeout=10
        )
        assert all(p.node.cluster == "edge" for p in polls(cp, type_url))
        # A rejected version stays out of the cache; the next poll says why.
        cp.set_resources(type_url, [Cluster(name="a", alt_stat_name="bad")], version="3")
        nack = cp.wait_for_request(
            type_url, lambda r: bool(r.message.error_detail.message), timeout=10
        )
        assert isinstance(nack.message, DiscoveryRequest)
        assert nack.message.version_info == "2"
        assert "marked bad" in nack.message.error_detail.message
        assert client.resources("cds")["a"].version == "2"


def test_unchanged_polls_deliver_nothing(cp: ControlPlane) -> None:
    cp.set_resources("cds", [Cluster(name="a")], version="1")
    with (
        XdsClient(cp.rest_url, transport="rest", poll_interval=0.05, node=NODE) as client,
        client.watch(Cluster, "a") as watch,
    ):
        event = watch.get(10)
        while not isinstance(event, ResourceUpdated):
            event = watch.get(10)
        mark = cp.mark()
        cp.wait_for_request("cds", since=mark + 2, timeout=10)  # several more polls

        def next_update() -> None:
            while True:  # connectivity events may come; no resource update may
                assert not isinstance(watch.get(0.2), ResourceUpdated)

        with pytest.raises(WaitTimeoutError):
            next_update()


def test_polling_rejects_delta() -> None:
    with pytest.raises(UsageError, match="sotw"):
        XdsClient("http://127.0.0.1:1", transport="rest", protocol="delta")


@pytest.mark.parametrize("transport", ["rest", "grpc-fetch"])
def test_async_client_polls(cp: ControlPlane, transport: TransportKind) -> None:
    cp.set_resources("cds", [Cluster(name="a")], version="1")

    async def main() -> None:
        async with AsyncXdsClient(
            server_of(cp, transport), transport=transport, poll_interval=0.1, node=NODE
        ) as client:
            found = await client.wait_for(Cluster, "a", timeout=10)
            assert found.name == "a"
            cp.set_resources("cds", [Cluster(name="a"), Cluster(name="b")], version="2")
            await client.wait_for(Cluster, "b", timeout=10)

    asyncio.run(main())


def test_rest_outage_reports_connectivity_and_recovers_without_changes() -> None:
    server = StubRestServer()
    server.set(CLUSTER, "1", {"a": pack(cluster("a"))})
    try:
        with (
            XdsClient(
                server.url,
                transport="rest",
                poll_interval=0.05,
                node=NODE,
                backoff=Backoff(strategy=wait_fixed(0.05)),
            ) as client,
            client.watch(Cluster, "a") as watch,
        ):

            def next_event(kind: type[T]) -> T:
                while True:
                    event = watch.get(10)
                    assert kind is ResourceUpdated or not isinstance(event, ResourceUpdated)
                    if isinstance(event, kind):
                        return event

            next_event(ResourceUpdated)
            seen = len(server.requests)
            server.fail(503, count=3)  # one stream's worth of retries: it fails
            down = next_event(ConnectivityChanged)
            while down.connected:
                down = next_event(ConnectivityChanged)
            assert down.reason is not None
            assert "503" in down.reason
            assert next_event(ConnectivityChanged).connected is True
            # The new stream fetched everything again; nothing changed, so no update.
            refetch = server.wait_requests(seen + 4)[seen + 3]
            assert refetch.request.version_info == ""  # the new stream's first poll is full
            with pytest.raises(WaitTimeoutError):
                watch_quiet(watch, 0.3)
            assert client.resources(Cluster)["a"].version == "1"
    finally:
        server.close()


def watch_quiet(watch: Watch[Cluster], seconds: float) -> None:
    """Raise WaitTimeoutError unless a resource update arrives within ``seconds``."""
    while True:
        event = watch.get(seconds)
        assert not isinstance(event, ResourceUpdated), event


def test_rest_over_https_with_bearer_token(caplog: pytest.LogCaptureFixture) -> None:
    ca = trustme.CA()
    server = StubRestServer(ssl_context=tls_server_context(ca))
    server.set(CLUSTER, "1", {"a": pack(cluster("a"))})
    token = "t0k3n-never-logged"
    try:
        with (
            caplog.at_level(logging.DEBUG),
            XdsClient(
                server.url,
                transport="rest",
                poll_interval=0.1,
                node=NODE,
                credentials=ChannelCredentialsConfig(ca_certificate=ca.cert_pem.bytes()),
                bearer_token=token,
            ) as client,
        ):
            assert client.wait_for(Cluster, "a", timeout=10).name == "a"
        assert server.requests[0].headers["authorization"] == f"Bearer {token}"
        assert server.url.startswith("https://")
        assert all(token not in record.getMessage() for record in caplog.records)
    finally:
        server.close()


def test_rest_fallback_and_probe_back_to_the_primary() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        primary_port = int(s.getsockname()[1])
    secondary = StubRestServer()
    secondary.set(CLUSTER, "s1", {"a": pack(cluster("a", timeout=2))})
    primary: StubRestServer | None = None
    try:
        with (
            XdsClient(
                [f"http://127.0.0.1:{primary_port}", secondary.url],
                transport="rest",
                poll_interval=0.1,
                node=NODE,
                backoff=Backoff(strategy=wait_fixed(0.05)),
                fallback_probe_interval=0.1,
            ) as client,
            client.watch(Cluster, "a"),
        ):
            found = client.wait_for(Cluster, "a", timeout=15)
            assert found.connect_timeout.seconds == 2  # from the fallback
            primary = StubRestServer(port=primary_port)
            primary.set(CLUSTER, "p1", {"a": pack(cluster("a", timeout=1))})
            client.wait_for(
                Cluster, "a", predicate=lambda c: c.connect_timeout.seconds == 1, timeout=15
            )
            assert client.current_server(Cluster) == f"http://127.0.0.1:{primary_port}"
    finally:
        secondary.close()
        if primary is not None:
            primary.close()
