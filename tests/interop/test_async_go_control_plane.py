"""AsyncXdsClient against go-control-plane v0.14.0 (tests/peers/go_control_plane).

``tools/gen_sync.py`` makes the XdsClient twin, test_go_control_plane.py. The peer
serves SotW and delta, over ADS and the per-type services, from go-control-plane's
``SnapshotCache`` (its ADS flag set for the ADS rows) or a ``LinearCache``, and logs
what it receives: the assertions about the wire read that log.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from tests._twin_support import run_async  # async-only
from tests.peers.go_control_plane import GoControlPlane, WithTtl, peer_binary
from xds_client import (
    AsyncWatch,
    AsyncXdsClient,
    ConnectivityChanged,
    Node,
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
)
from xds_client.errors import WaitTimeoutError
from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE

from ._interop_helpers import api_listener, eds_cluster, endpoints, my_service_snapshot

Protocol = Literal["sotw", "delta"]
BINARY, WHY_NOT = peer_binary()
pytestmark = [
    pytest.mark.interop,
    pytest.mark.timeout(90),
    pytest.mark.skipif(BINARY is None, reason=WHY_NOT),
]
MATRIX = [
    pytest.param("sotw", True, id="sotw-ads"),
    pytest.param("sotw", False, id="sotw-per-type"),
    pytest.param("delta", True, id="delta-ads"),
    pytest.param("delta", False, id="delta-per-type"),
]
TYPES = (LISTENER, ROUTE, CLUSTER, ENDPOINT)


@pytest.fixture(scope="module")
def peers() -> Iterator[dict[bool, GoControlPlane]]:
    """One peer per SnapshotCache ADS flag for the module; each test uses its own node."""
    with GoControlPlane(ads=True) as ads, GoControlPlane(ads=False) as per_type:
        yield {True: ads, False: per_type}


@pytest.fixture
def node_id(request: pytest.FixtureRequest) -> str:
    name: str = request.node.name
    return name


def client_for(
    peer: GoControlPlane, node_id: str, protocol: Protocol, ads: bool, **options: Any
) -> AsyncXdsClient:
    return AsyncXdsClient(
        peer.address, node=Node(node_id), protocol=protocol, ads=ads, **options
    )  # fmt: skip


def bad_cluster(name: str) -> Cluster:
    cluster = eds_cluster(name)
    cluster.connect_timeout.CopyFrom(Duration(seconds=-1))
    return cluster


def endpoint_port(snapshot: Any, cluster: str) -> int:
    assignment = snapshot.endpoints[cluster]
    port: int = assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value
    return port


async def next_of(
    watch: AsyncWatch[Any], kind: type[Any] | tuple[type[Any], ...], timeout: float = 10.0
) -> Any:
    """The next event of ``kind`` on ``watch`` (connectivity and other kinds skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        event = await watch.get(timeout=max(0.0, deadline - time.monotonic()))
        if isinstance(event, kind):
            return event


async def events_until_quiet(watch: AsyncWatch[Any], quiet: float = 0.5) -> list[Any]:
    """Every event the watch yields until it has been quiet for ``quiet`` seconds."""
    out: list[Any] = []
    while True:
        try:
            out.append(await watch.get(timeout=quiet))
        except WaitTimeoutError:
            return out


@pytest.mark.parametrize(("protocol", "ads"), MATRIX)
@run_async  # async-only
async def test_first_config_update_nack_and_recovery(
    peers: dict[bool, GoControlPlane], node_id: str, protocol: Protocol, ads: bool
) -> None:
    peer = peers[ads]
    peer.set_snapshot(node_id, my_service_snapshot(1001), "1")
    client = client_for(peer, node_id, protocol, ads)
    async with client, client.watch_config("my-service") as config:
        first = await config.get(timeout=10)
        assert first.ok, first.errors
        assert set(first.clusters) == {"my-cluster"}
        assert endpoint_port(first, "my-cluster") == 1001
        for type_url in TYPES:
            await peer.wait_for_request_async(
                lambda r: not r.is_nack and r.response_nonce != "",
                type_url=type_url,
                node_id=node_id,
            )
        # The node travels in the first request of the stream only (delta shows it: its
        # callback runs before go-control-plane copies the node into later requests).
        if protocol == "delta":
            mine = peer.requests(delta=True, node_id=node_id)
            for stream in {r.stream for r in mine}:
                sent = [r for r in mine if r.stream == stream]
                assert sent[0].has_node
                assert not any(r.has_node for r in sent[1:])

        # An update: the endpoint moves.
        mark = peer.mark()
        peer.set_snapshot(node_id, my_service_snapshot(1002), "2")
        second = await config.get(timeout=10)
        assert endpoint_port(second, "my-cluster") == 1002
        await peer.wait_for_request_async(
            lambda r: not r.is_nack and r.response_nonce != "" and r.version_info in ("", "2"),
            type_url=ENDPOINT,
            node_id=node_id,
            since=mark,
        )

        # An invalid cluster: NACKed with the name and the field, the last good one kept.
        mark = peer.mark()
        broken: dict[str, list[Message]] = {
            **my_service_snapshot(1002),
            CLUSTER: [bad_cluster("my-cluster")],
        }
        peer.set_snapshot(node_id, broken, "3")
        nack = await peer.wait_for_request_async(
            lambda r: r.is_nack, type_url=CLUSTER, node_id=node_id, since=mark
        )
        assert "my-cluster" in nack.error_message
        assert "connect_timeout" in nack.error_message
        if protocol == "sotw":
            assert nack.version_info == "2"  # the last version accepted
        kept = client.resources(Cluster)["my-cluster"].resource
        assert kept.connect_timeout.seconds == 1

        # A good snapshot again (a cluster unlike the last good one): ACKed, and the graph
        # follows it.
        mark = peer.mark()
        fixed = eds_cluster("my-cluster")
        fixed.connect_timeout.seconds = 2
        peer.set_snapshot(node_id, {**my_service_snapshot(1004), CLUSTER: [fixed]}, "4")
        await peer.wait_for_request_async(
            lambda r: not r.is_nack and r.response_nonce != "" and r.version_info in ("", "4"),
            type_url=CLUSTER,
            node_id=node_id,
            since=mark,
        )
        # (A snapshot may show the new endpoint before the new cluster clears the NACK.)
        latest = await config.get(timeout=10)
        while not (latest.ok and endpoint_port(latest, "my-cluster") == 1004):
            latest = await config.get(timeout=10)


@pytest.mark.parametrize(("protocol", "ads"), [pytest.param("sotw", True, id="sotw-ads")])
@run_async  # async-only
async def test_the_graph_clears_a_nack_when_the_last_good_cluster_comes_back(
    peers: dict[bool, GoControlPlane], node_id: str, protocol: Protocol, ads: bool
) -> None:
    peer = peers[ads]
    peer.set_snapshot(node_id, my_service_snapshot(1001), "1")
    client = client_for(peer, node_id, protocol, ads)
    async with client, client.watch_config("my-service") as config:
        assert (await config.get(timeout=10)).ok
        broken: dict[str, list[Message]] = {
            **my_service_snapshot(1001),
            CLUSTER: [bad_cluster("my-cluster")],
        }
        peer.set_snapshot(node_id, broken, "2")
        assert not (await config.get(timeout=10)).ok
        mark = peer.mark()
        peer.set_snapshot(node_id, my_service_snapshot(1001), "3")
        await peer.wait_for_request_async(
            lambda r: not r.is_nack and r.version_info == "3",
            type_url=CLUSTER,
            node_id=node_id,
            since=mark,
        )
        latest = await config.get(timeout=2)
        while not latest.ok:
            latest = await config.get(timeout=2)


@pytest.mark.parametrize(("protocol", "ads"), MATRIX)
@run_async  # async-only
async def test_removal_from_the_snapshot(
    peers: dict[bool, GoControlPlane], node_id: str, protocol: Protocol, ads: bool
) -> None:
    """SotW: LDS and CDS are full state, so absence is removal; delta: removed_resources."""
    peer = peers[ads]
    listeners = [api_listener("l1", "r"), api_listener("l2", "r")]
    peer.set_snapshot(node_id, {LISTENER: listeners, CLUSTER: [eds_cluster("c1")]}, "1")
    client = client_for(peer, node_id, protocol, ads)
    async with client, client.watch(LISTENER) as lds, client.watch(CLUSTER) as cds:
        seen = {
            (await next_of(lds, ResourceUpdated)).name,
            (await next_of(lds, ResourceUpdated)).name,
        }
        assert seen == {"l1", "l2"}
        assert (await next_of(cds, ResourceUpdated)).name == "c1"
        # The peer's log of the first responses may trail the client: read it first,
        # so that what follows the mark is the removal.
        await peer.wait_for_response_async(
            lambda r: "l2" in r.resources, type_url=LISTENER, node_id=node_id
        )
        mark = peer.mark()
        peer.set_snapshot(node_id, {LISTENER: listeners[1:], CLUSTER: [eds_cluster("c2")]}, "2")
        gone = await next_of(lds, ResourceRemoved)
        assert (gone.name, gone.reason) == ("l1", "deleted")
        cds_events = [await next_of(cds, (ResourceUpdated, ResourceRemoved)) for _ in range(2)]
        assert {(type(e).__name__, e.name) for e in cds_events} == {
            ("ResourceUpdated", "c2"),
            ("ResourceRemoved", "c1"),
        }
        # (The client may read the response before the wrapper reads the peer's log of it.)
        sent = await peer.wait_for_response_async(
            type_url=LISTENER, node_id=node_id, since=mark
        )  # fmt: skip
        if protocol == "delta":
            assert (sent.removed, sent.resources) == (("l1",), ())
        else:
            assert sent.resources == ("l2",)
        assert set(client.resources(LISTENER)) == {"l2"}
        assert set(client.resources(CLUSTER)) == {"c2"}


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
@run_async  # async-only
async def test_wildcard_and_named_mixed_with_a_linear_cache(protocol: Protocol) -> None:
    """One wildcard and two named watches on CDS, one name the server never has.

    The LinearCache serves CDS: its SotW side understands an explicit ``*`` next to
    names. (The SnapshotCache does not: docs/protocol.md, go-control-plane.)
    """
    with GoControlPlane(ads=False, linear_type=CLUSTER) as peer:
        peer.upsert(eds_cluster("c1"))
        peer.upsert(eds_cluster("c2"))
        client = client_for(peer, "mixed", protocol, False, does_not_exist_timeout=0.5)
        async with (
            client,
            client.watch(CLUSTER) as every,
            client.watch(CLUSTER, ["c2", "nope"]) as named,
        ):
            got = {(await next_of(every, ResourceUpdated)).name for _ in range(2)}
            assert got == {"c1", "c2"}
            assert (await next_of(named, ResourceUpdated)).name == "c2"
            assert (await next_of(named, ResourceDoesNotExist)).name == "nope"
            asked = {n for r in peer.requests(CLUSTER) for n in (*r.resource_names, *r.subscribe)}
            assert asked == {"*", "c2", "nope"}

            mark = peer.mark()
            peer.remove("c1")
            removed = await next_of(every, ResourceRemoved)
            assert removed.name == "c1"
            sent = await peer.wait_for_response_async(type_url=CLUSTER, since=mark)
            if protocol == "delta":
                assert sent.removed == ("c1",)
            else:
                assert sent.resources == ("c2",)
            # The named watch lost nothing and heard nothing new.
            assert not [
                e for e in await events_until_quiet(named, 0.3) if isinstance(e, ResourceRemoved)
            ]
            assert set(client.resources(CLUSTER)) == {"c2"}


@pytest.mark.parametrize(("protocol", "ads"), MATRIX)
@run_async  # async-only
async def test_restart_resumes_without_loss_or_duplicates(
    node_id: str, protocol: Protocol, ads: bool
) -> None:
    with GoControlPlane(ads=ads) as peer:
        # One cluster, named: in ADS mode the SnapshotCache answers a named SotW request
        # only when it names every cluster it has (docs/protocol.md).
        snapshot = my_service_snapshot(1001)
        peer.set_snapshot(node_id, snapshot, "1")
        client = client_for(peer, node_id, protocol, ads)
        async with (
            client,
            client.watch_config("my-service") as config,
            client.watch(CLUSTER, "my-cluster") as cds,
        ):
            first = await config.get(timeout=10)
            assert first.ok, first.errors
            assert (await next_of(cds, ResourceUpdated)).name == "my-cluster"
            for type_url in TYPES:
                await peer.wait_for_request_async(
                    lambda r: r.response_nonce != "", type_url=type_url
                )  # fmt: skip
            held = {t: {n: c.version for n, c in client.resources(t).items()} for t in TYPES}

            mark = peer.mark()
            peer.restart()
            for type_url in TYPES:
                resumed = await peer.wait_for_request_async(
                    lambda r: r.response_nonce == "", type_url=type_url, since=mark
                )  # fmt: skip
                if protocol == "delta":
                    assert dict(resumed.initial_resource_versions) == held[type_url], type_url
                else:
                    assert resumed.version_info == "1", type_url
            if protocol == "sotw":
                # The SnapshotCache sends the whole state again (it cannot know what the
                # client holds from a version_info alone); the client ACKs it.
                for type_url in TYPES:
                    await peer.wait_for_request_async(
                        lambda r: r.response_nonce != "", type_url=type_url, since=mark
                    )  # fmt: skip
            else:
                # Delta: the versions the client sent match, so nothing comes back.
                assert not peer.responses(since=mark)
            after = await events_until_quiet(cds, 0.5)
            assert not [e for e in after if not isinstance(e, ConnectivityChanged)], after
            assert {
                t: {n: c.version for n, c in client.resources(t).items()} for t in TYPES
            } == held

            # And the resumed stream carries the next update.
            peer.set_snapshot(node_id, {**snapshot, ENDPOINT: [endpoints("my-cluster", 1002)]}, "2")
            latest = await config.get(timeout=10)
            while endpoint_port(latest, "my-cluster") != 1002:
                latest = await config.get(timeout=10)


@pytest.mark.parametrize(
    ("protocol", "ads"),
    [
        pytest.param("sotw", True, id="sotw-ads"),
        pytest.param("delta", True, id="delta-ads"),
        pytest.param("delta", False, id="delta-per-type"),
    ],
)
@run_async  # async-only
async def test_a_fresh_stream_asking_only_for_missing_names_hears_does_not_exist(
    peers: dict[bool, GoControlPlane], node_id: str, protocol: Protocol, ads: bool
) -> None:
    """go-control-plane sends nothing back here (not even headers): the SnapshotCache in
    ADS mode holds a SotW request that does not name every cluster it has, and its delta
    side sends nothing for a name it never had. The client must still time out the name."""
    peer = peers[ads]
    peer.set_snapshot(node_id, {CLUSTER: [eds_cluster("c1")]}, "1")
    client = client_for(peer, node_id, protocol, ads, does_not_exist_timeout=0.5)
    async with client, client.watch(CLUSTER, "nope") as watch:
        await peer.wait_for_request_async(type_url=CLUSTER, node_id=node_id)
        assert (await next_of(watch, ResourceDoesNotExist, timeout=2)).name == "nope"
    assert not peer.responses(CLUSTER, node_id=node_id)  # the stream stayed silent


@pytest.mark.parametrize(("protocol", "ads"), MATRIX)
@run_async  # async-only
async def test_a_name_the_server_does_not_have_next_to_one_it_has(
    peers: dict[bool, GoControlPlane], node_id: str, protocol: Protocol, ads: bool
) -> None:
    """Once a response arrived on the stream, the timer runs and the missing name ends."""
    peer = peers[ads]
    peer.set_snapshot(node_id, {CLUSTER: [eds_cluster("c1")]}, "1")
    client = client_for(peer, node_id, protocol, ads, does_not_exist_timeout=0.5)
    async with client, client.watch(CLUSTER, ["c1", "nope"]) as watch:
        assert (await next_of(watch, ResourceUpdated)).name == "c1"
        assert (await next_of(watch, ResourceDoesNotExist, timeout=5)).name == "nope"


@run_async  # async-only
async def test_sotw_ttl_heartbeats_keep_a_resource() -> None:
    """The SnapshotCache with heartbeats resends a resource with a TTL as a bodiless
    ``Resource`` (no version of its own) at the same version_info, every interval while
    the client's request is open; the client keeps the resource alive."""
    with GoControlPlane(ads=True, heartbeat=0.2) as peer:
        peer.set_snapshot("ttl", {CLUSTER: [WithTtl(eds_cluster("c1"), ttl=0.6)]}, "1")
        client = client_for(peer, "ttl", "sotw", True)
        async with client, client.watch(CLUSTER) as watch:
            assert (await next_of(watch, ResourceUpdated)).name == "c1"
            mark = peer.mark()
            await peer.wait_for_response_async(lambda r: r.heartbeats == ("c1",), since=mark)
            later = await events_until_quiet(watch, 1.5)  # 2.5 TTLs
            assert not [e for e in later if isinstance(e, (ResourceRemoved, ResponseRejected))]
            assert not [r for r in peer.requests(CLUSTER, since=mark) if r.is_nack]
            assert "c1" in client.resources(CLUSTER)


@run_async  # async-only
async def test_delta_responses_carry_no_ttl() -> None:
    """go-control-plane puts a TTL only in SotW wrappers: over delta the same snapshot
    resource arrives without one and never expires."""
    with GoControlPlane(ads=True) as peer:
        peer.set_snapshot("ttl", {CLUSTER: [WithTtl(eds_cluster("c1"), ttl=0.2)]}, "1")
        client = client_for(peer, "ttl", "delta", True)
        async with client, client.watch(CLUSTER) as watch:
            assert (await next_of(watch, ResourceUpdated)).name == "c1"
            later = await events_until_quiet(watch, 0.8)  # 4 TTLs
            assert not [e for e in later if isinstance(e, ResourceRemoved)]
            assert "c1" in client.resources(CLUSTER)


@run_async  # async-only
async def test_sotw_ttl_without_heartbeats_expires() -> None:
    """Without heartbeats the TTL runs out and the resource goes, reason ``ttl_expired``."""
    with GoControlPlane(ads=True) as peer:
        peer.set_snapshot("ttl", {CLUSTER: [WithTtl(eds_cluster("c1"), ttl=0.3)]}, "1")
        client = client_for(peer, "ttl", "sotw", True)
        async with client, client.watch(CLUSTER) as watch:
            assert (await next_of(watch, ResourceUpdated)).name == "c1"
            gone = await next_of(watch, ResourceRemoved, timeout=5)
            assert (gone.name, gone.reason) == ("c1", "ttl_expired")


@pytest.mark.parametrize(
    ("protocol", "ads"),
    [pytest.param("sotw", True, id="sotw-ads"), pytest.param("delta", True, id="delta-ads")],
)
@run_async  # async-only
async def test_ten_thousand_clusters(
    peers: dict[bool, GoControlPlane], node_id: str, protocol: Protocol, ads: bool
) -> None:
    peer = peers[ads]
    names = [f"cluster-{i:05d}" for i in range(10_000)]
    peer.set_snapshot(node_id, {CLUSTER: [eds_cluster(n) for n in names]}, "1")
    client = client_for(peer, node_id, protocol, ads)
    async with client, client.watch(CLUSTER) as watch:
        await peer.wait_for_request_async(
            lambda r: r.response_nonce != "" and not r.is_nack,
            type_url=CLUSTER,
            node_id=node_id,
            timeout=60,
        )
        assert len(client.resources(CLUSTER)) == 10_000
        assert sorted(client.resources(CLUSTER)) == names
        assert watch.pending + watch.coalesced >= 1
