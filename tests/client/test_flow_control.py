"""ADS flow control (``flow_control=True``): the next response is read, and the last one
ACKed, only once the watchers it fed have taken their events."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from tests._waiting import wait_until
from xds_client import ResourceUpdated
from xds_client.errors import WaitTimeoutError
from xds_client.testing import ControlPlane

from .conftest import ClientProxy, WatchProxy

pytestmark = pytest.mark.timeout(60)

MakeClient = Callable[..., ClientProxy]


def cluster(name: str, seconds: int = 1) -> Cluster:
    c = Cluster(name=name)
    c.connect_timeout.seconds = seconds
    return c


def _wait_pending(watch: WatchProxy, at_least: int, timeout: float = 5.0) -> None:
    wait_until(lambda: watch.pending >= at_least, timeout, f"{at_least} events pending")


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_ack_waits_until_the_watcher_took_the_update(
    cp: ControlPlane, make_client: MakeClient, protocol: str
) -> None:
    cp.set_resources(Cluster, {"a": cluster("a", 1)}, version="1")
    client = make_client(cp.address, protocol=protocol, flow_control=True)
    version = "1" if protocol == "sotw" else None
    with client.watch(Cluster, "a") as watch:
        _wait_pending(watch, 1)
        with pytest.raises(WaitTimeoutError):
            cp.wait_for_ack(Cluster, version=version, timeout=0.5)  # the app has not got it
        assert watch.next(ResourceUpdated).resource.connect_timeout.seconds == 1
        cp.wait_for_ack(Cluster, version=version, timeout=5)  # now it has


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_a_slow_watcher_sees_every_state_without_folding(
    cp: ControlPlane, make_client: MakeClient, protocol: str
) -> None:
    cp.set_resources(Cluster, {"a": cluster("a", 1)}, version="1")
    client = make_client(cp.address, protocol=protocol, flow_control=True, queue_size=1)
    with client.watch(Cluster, "a") as watch:
        _wait_pending(watch, 1)
        for seconds in range(2, 6):  # pushed while the watcher holds version 1
            cp.update(Cluster, {"a": cluster("a", seconds)}, version=str(seconds))
        seen = [watch.next(ResourceUpdated).resource.connect_timeout.seconds]
        while seen[-1] != 5:
            seen.append(watch.next(ResourceUpdated).resource.connect_timeout.seconds)
        # Nothing folded in the client (this server itself sends its latest state once
        # the client ACKed, so it may skip some).
        assert watch.watch.coalesced == 0
        assert seen == sorted(set(seen))


def test_without_flow_control_the_ack_does_not_wait(
    cp: ControlPlane, make_client: MakeClient
) -> None:
    cp.set_resources(Cluster, {"a": cluster("a", 1)}, version="1")
    client = make_client(cp.address, protocol="delta")
    with client.watch(Cluster, "a") as watch:
        cp.wait_for_ack(Cluster, timeout=5)
        assert watch.next(ResourceUpdated).name == "a"
