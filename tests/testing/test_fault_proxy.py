"""FaultProxy: a response cut in the middle reaches the client as a dead connection."""

from __future__ import annotations

import time

from envoy.config.cluster.v3.cluster_pb2 import Cluster

from tests._waiting import wait_until
from xds_client import Backoff, Node, ResourceUpdated, Watch, XdsClient
from xds_client.testing import ControlPlane, FaultProxy


def next_update(watch: Watch[Cluster]) -> ResourceUpdated[Cluster]:
    deadline = time.monotonic() + 10
    while True:
        event = watch.get(max(0.0, deadline - time.monotonic()))
        if isinstance(event, ResourceUpdated):
            return event


def test_a_cut_response_is_never_applied_and_the_client_recovers() -> None:
    with (
        ControlPlane(rest_port=None, heartbeat_interval=None) as cp,
        FaultProxy(cp.address) as proxy,
    ):
        cp.set_resources(Cluster, {"a": Cluster(name="a", alt_stat_name="v1")}, version="1")
        with XdsClient(proxy.address, node=Node(id="n"), backoff=Backoff(initial=0.05)) as client:
            watch = client.watch(Cluster, "a")
            assert next_update(watch).version == "1"
            proxy.cut_next_response()
            big = Cluster(name="a", alt_stat_name="v2" + "x" * 40_000)  # several frames
            cp.set_resources(Cluster, {"a": big}, version="2")
            got = next_update(watch)
            assert got.version == "2"
            assert got.resource == big
        assert proxy.cuts == 1
        # The cut took the connection down: the client had to open a second stream.
        wait_until(lambda: len(cp.streams()) >= 2, 5, "a second stream")
        assert len(cp.streams()) == 2
