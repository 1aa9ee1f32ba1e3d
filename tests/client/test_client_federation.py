"""Federation (gRFC A47): each xdstp:// name goes to its authority's servers.

Two ControlPlanes play two authorities; every test runs with XdsClient and
AsyncXdsClient (the ``mode`` fixture).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from xds_client import ConnectivityChanged, CountingMetrics, ResourceUpdated, XdsClient
from xds_client.errors import ResourceNameError
from xds_client.resources import CLUSTER
from xds_client.testing import ControlPlane

from .conftest import FAST_BACKOFF, ClientProxy, Mode, _node

pytestmark = pytest.mark.timeout(60)

CDS = "envoy.config.cluster.v3.Cluster"
MakeClient = Callable[..., ClientProxy]


def cluster(name: str, seconds: int = 1) -> Cluster:
    c = Cluster(name=name)
    c.connect_timeout.seconds = seconds
    return c


@pytest.fixture
def other() -> Iterator[ControlPlane]:
    with ControlPlane(rest_port=None, heartbeat_interval=None) as control_plane:
        yield control_plane


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
@pytest.mark.parametrize("ads", [True, False], ids=["ads", "per-type"])
def test_names_go_to_their_authority(
    cp: ControlPlane, other: ControlPlane, make_client: MakeClient, protocol: str, ads: bool
) -> None:
    remote = f"xdstp://other.example/{CDS}/remote?b=2&a=1"
    normal = f"xdstp://other.example/{CDS}/remote?a=1&b=2"
    local = f"xdstp://local.example/{CDS}/local"
    cp.set_resources(CLUSTER, {"plain": cluster("plain", 1), local: cluster(local, 3)})
    other.set_resources(CLUSTER, {normal: cluster(normal, 2)})
    client = make_client(
        cp.address,
        protocol=protocol,
        ads=ads,
        authorities={"other.example": other.address, "local.example": ()},
    )
    with client.watch(Cluster, ["plain", remote, local]) as watch:
        got: dict[str, int] = {}
        while len(got) < 3:
            event = watch.next(ResourceUpdated)
            got[event.name] = event.resource.connect_timeout.seconds
        assert set(client.resources(Cluster)) == {"plain", normal, local}
    # The name arrives normalised (sorted context parameters), from its authority's server.
    assert got == {"plain": 1, normal: 2, local: 3}
    asked_other = {n for r in other.requests() for n in _names(r.message)}
    asked_cp = {n for r in cp.requests() for n in _names(r.message)}
    assert asked_other == {normal}
    assert asked_cp == {"plain", local}  # an authority without servers uses the top level


def _names(message: object) -> list[str]:
    names = getattr(message, "resource_names", None)
    if names is None or not len(names):
        names = getattr(message, "resource_names_subscribe", [])
    return list(names)


def test_one_stream_per_distinct_server(
    cp: ControlPlane, other: ControlPlane, make_client: MakeClient
) -> None:
    a = f"xdstp://a.example/{CDS}/x"
    b = f"xdstp://b.example/{CDS}/y"
    other.set_resources(CLUSTER, {a: cluster(a), b: cluster(b)})
    client = make_client(
        cp.address, authorities={"a.example": other.address, "b.example": [other.address]}
    )
    with client.watch(Cluster, [a, b]) as watch:
        names = {watch.next(ResourceUpdated).name, watch.next(ResourceUpdated).name}
    assert names == {a, b}
    assert len(other.streams()) == 1  # A47: two authorities, one server, one stream
    assert cp.streams() == []  # nothing was asked of the top-level server


def test_delta_glob_collection(
    cp: ControlPlane, other: ControlPlane, make_client: MakeClient
) -> None:
    prefix = f"xdstp://other.example/{CDS}/pool"
    inside = [f"{prefix}/one", f"{prefix}/two"]
    other.set_resources(
        CLUSTER,
        {
            n: cluster(n)
            for n in [*inside, f"{prefix}/deeper/three", f"xdstp://other.example/{CDS}/x"]
        },
        version="1",
    )
    client = make_client(cp.address, protocol="delta", authorities={"other.example": other.address})
    with client.watch(Cluster, f"{prefix}/*") as watch:
        got = {watch.next(ResourceUpdated).name, watch.next(ResourceUpdated).name}
        assert got == set(inside)
        other.update(CLUSTER, {f"{prefix}/three": cluster(f"{prefix}/three", 9)}, version="2")
        event = watch.next(ResourceUpdated)
        assert event.name == f"{prefix}/three"
        # Only direct children: neither the deeper one nor one outside the path.
        assert set(client.resources(Cluster)) == {*inside, f"{prefix}/three"}


def test_watch_errors_name_the_problem(cp: ControlPlane, make_client: MakeClient) -> None:
    client = make_client(cp.address)
    with pytest.raises(ResourceNameError, match="authority 'nowhere' is not configured"):
        client.watch(Cluster, f"xdstp://nowhere/{CDS}/x")
    with pytest.raises(ResourceNameError, match="but the watch is of"):
        client.watch(Cluster, "xdstp://nowhere/envoy.config.listener.v3.Listener/x")
    with pytest.raises(ResourceNameError, match="need protocol='delta'"):
        client.watch(Cluster, f"xdstp:///{CDS}/*")


def test_from_bootstrap_written_by_control_plane(
    cp: ControlPlane, other: ControlPlane, tmp_path: Path, mode: Mode, loop_thread: object
) -> None:
    remote = f"xdstp://other.example/{CDS}/r"
    other.set_resources(CLUSTER, {remote: cluster(remote, 4)})
    path = cp.write_bootstrap(tmp_path / "bootstrap.json", authorities={"other.example": other})
    config = json.loads(path.read_text())
    assert config["authorities"]["other.example"]["xds_servers"][0]["server_uri"] == other.address
    if mode == "sync":
        client = XdsClient.from_bootstrap(path, backoff=FAST_BACKOFF)
        try:
            got = client.wait_for(Cluster, remote, timeout=10)
        finally:
            client.close()
    else:
        from xds_client import AsyncXdsClient

        proxy = ClientProxy.__new__(ClientProxy)
        proxy.mode, proxy.loop = mode, loop_thread  # type: ignore[assignment]
        proxy.client = proxy.loop.call(  # type: ignore[union-attr]
            lambda: AsyncXdsClient.from_bootstrap(path, backoff=FAST_BACKOFF, node=_node())
        )
        try:
            got = proxy.wait_for(Cluster, remote, timeout=10)
        finally:
            proxy.close()
    assert got.connect_timeout.seconds == 4


def test_metrics_and_csds_per_authority(
    cp: ControlPlane, other: ControlPlane, make_client: MakeClient
) -> None:
    remote = f"xdstp://other.example/{CDS}/r"
    cp.set_resources(CLUSTER, {"plain": cluster("plain")})
    other.set_resources(CLUSTER, {remote: cluster(remote)})
    metrics = CountingMetrics()
    client = make_client(cp.address, authorities={"other.example": other.address}, metrics=metrics)
    with client.watch(Cluster, ["plain", remote]) as watch:
        watch.next(ResourceUpdated)
        watch.next(ResourceUpdated)
        # Counts cover both streams, and each authority on its own (gRFC A78 labels).
        expected = {
            (CLUSTER, "#old"): {"ACKED": 1},
            (CLUSTER, "other.example"): {"ACKED": 1},
        }
        deadline = time.monotonic() + 5
        while metrics.authority_counts != expected and time.monotonic() < deadline:
            threading.Event().wait(0.02)  # metrics are reported just after the events
        assert metrics.authority_counts == expected
        assert metrics.resource_counts[CLUSTER] == {"ACKED": 2}
        dump = client.config_dump()
        names = {c.name for c in dump.generic_xds_configs}
        assert names == {"plain", remote}  # one CSDS dump, names carry their authority


def test_connectivity_is_told_to_the_watches_of_that_server(
    cp: ControlPlane, other: ControlPlane, make_client: MakeClient
) -> None:
    remote = f"xdstp://other.example/{CDS}/r"
    cp.set_resources(CLUSTER, {"plain": cluster("plain")})
    other.set_resources(CLUSTER, {remote: cluster(remote)})
    client = make_client(cp.address, authorities={"other.example": other.address})
    with client.watch(Cluster, "plain") as local, client.watch(Cluster, remote) as far:
        local.next(ResourceUpdated)
        far.next(ResourceUpdated)
        other.stop_serving()
        down = far.next(ConnectivityChanged, where=lambda e: not e.connected)
        assert down.server == other.address
        with pytest.raises(AssertionError):  # the top-level server's watch hears nothing
            local.next(ConnectivityChanged, timeout=0.5)
        other.resume_serving()
        far.next(ConnectivityChanged, where=lambda e: e.connected, timeout=10)


def test_authority_falls_back_and_returns_to_its_primary(
    cp: ControlPlane, other: ControlPlane, make_client: MakeClient
) -> None:
    """gRFC A71 within one authority's own server list (indices are per authority)."""
    remote = f"xdstp://other.example/{CDS}/r"
    with ControlPlane(rest_port=None, heartbeat_interval=None) as primary:
        primary.set_resources(CLUSTER, {remote: cluster(remote, 1)})
        other.set_resources(CLUSTER, {remote: cluster(remote, 2)})
        primary.stop_serving()
        client = make_client(
            cp.address,
            authorities={"other.example": [primary.address, other.address]},
            fallback_probe_interval=0.1,
        )
        with client.watch(Cluster, remote) as watch:
            got = watch.next(ResourceUpdated, timeout=10)
            assert got.resource.connect_timeout.seconds == 2  # from the fallback
            primary.resume_serving()
            back = watch.next(
                ResourceUpdated, timeout=15, where=lambda e: e.resource.connect_timeout.seconds == 1
            )
            assert back.name == remote
        assert cp.streams() == []  # the top-level server was never asked
