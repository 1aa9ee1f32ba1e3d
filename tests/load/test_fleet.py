"""The Fleet against the in-process ControlPlane: streams, connections, measurements."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryRequest

from xds_client.errors import TransportError, UsageError
from xds_client.load import (
    SAMPLE_LISTENER,
    ControlPlaneDriver,
    Fleet,
    FleetOptions,
    LoadEvent,
    Report,
    sample_config,
)
from xds_client.load import _fleet as fleet_module
from xds_client.load._client import CHANNEL_OPTIONS, SOTW_METHOD, STATUS_LOST
from xds_client.testing import ControlPlane

CLUSTERS = 5


@pytest.fixture
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(rest_port=None, heartbeat_interval=None, max_workers=64) as cp:
        cp.set_snapshot(sample_config(CLUSTERS))
        yield cp


def _options(cp: ControlPlane, **more: object) -> FleetOptions:
    base: dict[str, object] = {
        "server": cp.address, "nodes": 4, "rate": 200.0, "duration": 0.3, "connect_timeout": 5.0,
    }  # fmt: skip
    base.update(more)
    return FleetOptions(**base)  # type: ignore[arg-type]


async def _until_complete(fleet: Fleet, nodes: int) -> Report:
    """Start ``nodes`` clients, wait until all hold a complete config, stop, report."""
    fleet.add(nodes)
    await fleet.wait_complete(nodes, timeout=20.0)
    report = fleet.report()
    await fleet.stop()
    return report


def test_each_client_has_its_own_node_stream_and_connection(plane: ControlPlane) -> None:
    report = asyncio.run(_until_complete(Fleet(_options(plane, nodes=5)), 5))
    streams = plane.streams()
    assert len(streams) == 5
    assert sorted(s.node_id or "" for s in streams) == [f"node-{i}" for i in range(5)]
    # One TCP connection per client: five distinct client ports on the server's side.
    assert len({s.peer for s in streams}) == 5
    assert report.clients_started == report.clients_complete == 5
    assert report.first_config.count == 5
    assert report.resources_held == 5 * (1 + 1 + 2 * CLUSTERS)
    assert report.errors == {}
    # ...and per client:
    assert [c.node_id for c in report.clients] == [f"node-{i}" for i in range(5)]
    for client in report.clients:
        assert client.first_config is not None
        assert (client.streams, client.nacks, client.errors) == (1, 0, 0)
        assert client.acks >= 4  # LDS, CDS, RDS, EDS
        assert client.resources_held == 1 + 1 + 2 * CLUSTERS
        assert client.bytes_received > 0
        assert client.bytes_sent > 0
    assert sum(c.bytes_received for c in report.clients) == report.bytes_received


def test_channels_without_a_local_subchannel_pool_share_one_connection(
    plane: ControlPlane,
) -> None:
    """Why CHANNEL_OPTIONS matter: grpcio's default pools the connection (grpc#20985),
    and the peer count above would then be 1. Proves that check can fail."""
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest

    async def open_streams(options: tuple[tuple[str, object], ...]) -> None:
        channels = [grpc.aio.insecure_channel(plane.address, options=options) for _ in range(3)]
        calls: list[Any] = [
            c.stream_stream(SOTW_METHOD, request_serializer=DiscoveryRequest.SerializeToString)()
            for c in channels
        ]
        for i, call in enumerate(calls):
            request = DiscoveryRequest(type_url="x")
            request.node.id = f"n{i}"
            await call.write(request)
        await asyncio.to_thread(plane.wait_for_streams, 3)
        for call in calls:
            call.cancel()
        for channel in channels:
            await channel.close()

    asyncio.run(open_streams(()))
    shared = {s.peer for s in plane.streams()}
    asyncio.run(open_streams(CHANNEL_OPTIONS))
    own = {s.peer for s in plane.streams()} - shared
    assert len(shared) == 1
    assert len(own) == 3


def test_envoy_profile_follows_references(plane: ControlPlane) -> None:
    asyncio.run(_until_complete(Fleet(_options(plane)), 1))
    assert _last_names(plane, "lds") == _last_names(plane, "cds") == set()  # legacy wildcard
    assert _last_names(plane, "rds") == {"load-routes"}
    assert _last_names(plane, "eds") == {f"cluster-{i:04d}" for i in range(CLUSTERS)}
    node_sent = [r.message.HasField("node") for r in plane.requests()]
    assert all(node_sent)  # Envoy sends node in every request


def _last_names(cp: ControlPlane, type: str, stream_id: int = 1) -> set[str]:
    """The names a stream subscribes to, from its requests (SotW lists, delta diffs)."""
    names: set[str] = set()
    for r in cp.requests(type, stream_id=stream_id):
        m = r.message
        if isinstance(m, DeltaDiscoveryRequest):
            names |= set(m.resource_names_subscribe)
            names -= set(m.resource_names_unsubscribe)
        else:
            names = set(m.resource_names)
    return names


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_grpc_profile_asks_by_name_down_the_chain(plane: ControlPlane, protocol: str) -> None:
    fleet = Fleet(_options(plane, profile="grpc", protocol=protocol))
    report = asyncio.run(_until_complete(fleet, 2))
    assert report.clients_complete == 2
    for stream_id in (1, 2):
        assert _last_names(plane, "lds", stream_id) == {SAMPLE_LISTENER}
        assert _last_names(plane, "cds", stream_id) == {f"cluster-{i:04d}" for i in range(CLUSTERS)}
    assert [s.kind for s in plane.streams()] == [protocol, protocol]
    first = [r for r in plane.requests() if r.stream_id == 1]
    assert first[0].message.HasField("node")
    assert not any(r.message.HasField("node") for r in first[1:])  # gRPC: once per stream


async def _wait(check: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    """Poll ``check`` on the loop until it is true; fail the test after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


def _eds_acks(fleet: Fleet, count: int) -> Callable[[], bool]:
    return lambda: len(fleet.recorder.push_to_ack.get("EDS", ())) >= count


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_pushes_are_acked_by_every_client(plane: ControlPlane, protocol: str) -> None:
    events: list[LoadEvent] = []
    driver = ControlPlaneDriver(plane, clusters=CLUSTERS)
    fleet = Fleet(_options(plane, protocol=protocol), on_event=events.append)

    async def scenario() -> Report:
        fleet.add(3)
        await fleet.wait_complete(3)
        for step in (1, 2):
            await driver.push(step)
            await _wait(_eds_acks(fleet, 3 * step), f"three ACKs of push {step}")
        report = fleet.report()
        await fleet.stop()
        return report

    report = asyncio.run(scenario())
    pushed = [v for v in report.versions if v.type == "EDS"]
    assert len(pushed) == 2
    # Every pushed version was ACKed by all three, and each ACK is one sample.
    assert all(v.acks == 3 and v.nacks == 0 for v in pushed)
    assert report.push_to_ack["EDS"].count == 6
    assert all(0 <= v.convergence < 20 for v in pushed)
    assert [e.kind for e in events].count("first_config") == 3
    assert [e.kind for e in events].count("ack") == 6


def test_a_fan_out_run_pushes_on_schedule(plane: ControlPlane) -> None:
    fleet = Fleet(
        _options(plane, nodes=2, duration=1.0, push_interval=0.3),
        driver=ControlPlaneDriver(plane, clusters=CLUSTERS),
    )
    report = asyncio.run(fleet.run())
    assert [v.type for v in report.versions] == ["EDS"] * len(report.versions)
    assert report.push_to_ack["EDS"].count >= 1  # how many depends on the machine's load


def test_a_bad_resource_is_nacked_as_envoy_would(plane: ControlPlane) -> None:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    bad = Cluster(name="cluster-0000", type=Cluster.EDS)
    bad.connect_timeout.seconds = -1  # (validate.rules): must be > 0
    bad.eds_cluster_config.eds_config.ads.SetInParent()
    events: list[LoadEvent] = []
    fleet = Fleet(_options(plane, validate=True), on_event=events.append)

    async def scenario() -> Report:
        fleet.add(2)
        await fleet.wait_complete(2)
        await asyncio.to_thread(plane.update, "cds", [bad])
        await _wait(lambda: fleet.recorder.nacks == 2, "two NACKs")
        report = fleet.report()
        await fleet.stop()
        return report

    report = asyncio.run(scenario())
    assert report.nacks == 2
    nacks = [e for e in events if e.kind == "nack"]
    assert len(nacks) == 2
    assert all(e.name == "CDS" and "connect_timeout" in e.detail for e in nacks)
    assert [c.nacks for c in report.clients] == [1, 1]
    codes = {
        r.message.error_detail.code for r in plane.requests("cds") if r.message.error_detail.code
    }
    assert codes == {13}  # Envoy's NACK code


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_reconnect_storm_measures_the_recovery(plane: ControlPlane, protocol: str) -> None:
    fleet = Fleet(_options(plane, protocol=protocol))

    async def scenario() -> Report:
        fleet.add(4)
        await fleet.wait_complete(4)
        assert fleet.drop_all() == 4
        await _wait(lambda: (fleet.report().storm or {}).get("recovery"), "the recovery")
        # A delta client is back once its new stream is open and it holds everything;
        # the server records the stream when the request reaches it, a moment later.
        await _wait(lambda: len(plane.streams()) == 8, "the server to see 8 streams")
        report = fleet.report()
        await fleet.stop()
        return report

    report = asyncio.run(scenario())
    assert report.storm is not None
    assert report.storm["clients"] == report.storm["recovered"] == 4
    assert report.storm["recovery"] > 0
    assert len(plane.streams()) == 8
    assert report.reconnects == 4
    assert report.errors == {}  # dropping on purpose is not an error


def test_a_storm_in_a_run_is_reported(plane: ControlPlane) -> None:
    report = asyncio.run(Fleet(_options(plane, nodes=2, duration=0.5, storm_at=0.1)).run())
    assert report.storm is not None
    assert report.storm["clients"] == 2


def test_churn_replaces_clients_with_new_nodes(plane: ControlPlane) -> None:
    # Churn is a share of `nodes` per minute: all of 240 per minute is one every 0.25 s;
    # four clients run, so the test sees about four replacements in its second.
    fleet = Fleet(_options(plane, nodes=240, duration=1.1, churn=1.0))
    report = asyncio.run(_hold_with(fleet, 4))
    ids = {s.node_id for s in plane.streams()}
    assert report.clients_started > 4
    assert len(ids) == report.clients_started  # every new client is a new node
    assert len(report.clients) == report.clients_started  # the churned out ones too


async def _hold_with(fleet: Fleet, nodes: int) -> Report:
    """Start ``nodes`` clients, then hold as run() does (churn at the options' rate)."""
    fleet.add(nodes)
    fleet._run_start = asyncio.get_running_loop().time()
    await fleet._hold()
    report = fleet.report()
    await fleet.stop()
    return report


def test_an_unreachable_server_is_a_transport_error() -> None:
    options = FleetOptions(server="127.0.0.1:1", nodes=2, duration=5.0, connect_timeout=0.5)
    with pytest.raises(TransportError, match=r"cannot reach the xDS server at 127\.0\.0\.1:1"):
        asyncio.run(Fleet(options).run())


def test_a_server_refusing_every_stream_says_so(plane: ControlPlane) -> None:
    plane.fail_streams(grpc.StatusCode.PERMISSION_DENIED, "no entry", count=None)
    options = _options(plane, nodes=2, duration=5.0, connect_timeout=1.5)
    fleet = Fleet(options)
    with pytest.raises(TransportError, match=r"refused every stream .*PERMISSION_DENIED: no entry"):
        asyncio.run(fleet.run())
    # Every failed stream is counted by the server's status; a write that raced the end
    # of a stream (grpc.aio then loses the status) is counted as such, never as a crash
    # of the client or as gRPC's INTERNAL.
    errors = fleet.recorder.errors
    assert errors["PERMISSION_DENIED"] >= 2
    assert set(errors) <= {"PERMISSION_DENIED", STATUS_LOST}


def test_more_clients_than_file_descriptors_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    with pytest.raises(UsageError, match=r"10000 clients need about 10064 file descriptors"):
        fleet_module.check_fd_limit(10_000)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("nodes", 0, "nodes must be at least 1"),
        ("rate", 0.0, "rate must be positive"),
        ("churn", 2.0, "churn is a share"),
        ("node_id", "node-{j}", "bad node id template"),
    ],
)
def test_bad_options_are_usage_errors(field: str, value: object, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        FleetOptions(server="127.0.0.1:1", **{field: value})  # type: ignore[arg-type]


def test_push_interval_needs_a_driver() -> None:
    with pytest.raises(UsageError, match="needs a driver"):
        Fleet(FleetOptions(server="127.0.0.1:1", push_interval=1.0))
