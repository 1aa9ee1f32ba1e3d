"""The conformance checker against go-control-plane v0.14.0 (tests/peers/go_control_plane).

Three set-ups: the SnapshotCache in ADS mode, without it (with TTLs and
heartbeats), and a LinearCache serving EDS. Each runs every check, SotW and
delta, ADS and per-type, with a driver that changes the peer's caches. What
go-control-plane fails is pinned here and explained in docs/conformance.md
(each confirmed in its code): a change in either direction fails this test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from google.protobuf.message import Message

from tests.graph._graph_resources import api_listener, eds_cluster, endpoints, routes
from tests.peers.go_control_plane import GoControlPlane, WithTtl, peer_binary
from xds_client.conformance import Options, render_table, run
from xds_client.resources import resource_type

from ._conformance_peers import GoPeerDriver

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

NODE = "xds-conformance"
SECOND = "second-node"
CDS, EDS, LDS, RDS = (resource_type(a).type_url for a in ("cds", "eds", "lds", "rds"))
BOTH = ("ads", "per-type")


def _resources(*, ttl: bool) -> dict[str, Sequence[Message | WithTtl]]:
    second: Message | WithTtl = endpoints("b", 1002)
    if ttl:
        second = WithTtl(endpoints("b", 1002), ttl=5.0)
    return {
        LDS: [api_listener("l1", "r1"), api_listener("l2", "r2")],
        RDS: [routes("r1", "a"), routes("r2", "b")],
        CDS: [eds_cluster("a"), eds_cluster("b")],
        EDS: [endpoints("a", 1001), second],
    }


# The snapshot cache answers "*" with no resources: it filters by the literal names
# of the request (simple.go createResponse), although the subscription knows it is a
# wildcard. After a NACK it resends the rejected version: the NACK's version_info is
# the last accepted one, which differs from the snapshot's (simple.go CreateWatch).
SNAPSHOT_FAILS = {
    **{("sotw-wildcard-explicit", t): "failed" for t in BOTH},
    **{("sotw-wildcard-mixed", t): "failed" for t in BOTH},
    **{("sotw-nack-no-repeat", t): "failed" for t in BOTH},
}
# ADS mode holds a request that does not name every resource of the snapshot
# (simple.go respond: "ADS mode: not responding"), by design.
ADS_MODE_HOLDS = {
    **{("sotw-subscribe-answered", t): "failed" for t in BOTH},
    **{("sotw-full-state", t): "failed" for t in BOTH},
    **{("sotw-only-requested", t): "failed" for t in BOTH},
}
SETUPS: Mapping[str, tuple[dict[str, object], bool, Mapping[tuple[str, str], str]]] = {
    "snapshot-ads-mode": ({"ads": True}, False, {**SNAPSHOT_FAILS, **ADS_MODE_HOLDS}),
    "snapshot": ({"ads": False, "heartbeat": 0.3}, True, SNAPSHOT_FAILS),
    "linear-eds": ({"ads": False, "linear_type": EDS}, False, SNAPSHOT_FAILS),
}


@pytest.fixture(scope="module")
def binary() -> None:
    found, why = peer_binary()
    if found is None:
        pytest.skip(why)


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_go_control_plane_conformance(setup: str, binary: None) -> None:
    kwargs, ttl, expected = SETUPS[setup]
    with GoControlPlane(**kwargs) as peer:  # type: ignore[arg-type]
        driver = GoPeerDriver(peer, NODE, _resources(ttl=ttl))
        peer.set_snapshot(SECOND, {CDS: [eds_cluster("a")], LDS: [api_listener("l1", "r1")]}, "1")
        report = run(
            peer.address,
            driver=driver,
            options=Options(
                node_id=NODE, second_node_id=SECOND, response_timeout=1.0, ttl_window=1.0
            ),
        )
    print(render_table(report, evidence=False))  # what docs/conformance.md publishes
    not_passed = {
        (r.check.id, r.transport): r.outcome for r in report.results if r.outcome != "passed"
    }
    assert not_passed == dict(expected), render_table(report, only_failures=True, evidence=True)
