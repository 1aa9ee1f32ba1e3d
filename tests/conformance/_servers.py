"""What the conformance tests serve: every type, links between them, a TTL to heartbeat."""

from __future__ import annotations

from tests.graph._graph_resources import api_listener, eds_cluster, endpoints, routes
from xds_client.conformance import Options
from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE
from xds_client.testing import ControlPlane

# Short waits: the servers are local; a failing check waits response_timeout.
FAST = Options(response_timeout=2.0, quiet_period=0.4, ttl_window=1.0)


def serve(cp: ControlPlane, node_id: str | None = None) -> None:
    """Two of each type (CDS -> EDS, LDS -> RDS); endpoints ``b`` expire without heartbeats."""
    cp.set_snapshot(
        {
            LISTENER: [api_listener("l1", "r1"), api_listener("l2", "r2")],
            ROUTE: [routes("r1", "a"), routes("r2", "b")],
            CLUSTER: [eds_cluster("a"), eds_cluster("b")],
            ENDPOINT: [endpoints("a", 1001)],
        },
        version="1",
        node_id=node_id,
    )
    cp.update(ENDPOINT, [endpoints("b", 1002)], ttl=5.0, node_id=node_id)


def serve_second(cp: ControlPlane, node_id: str) -> None:
    """What the second node of the per-node check is served: less than the first."""
    cp.set_snapshot(
        {
            LISTENER: [api_listener("l1", "r1")],
            ROUTE: [routes("r1", "a")],
            CLUSTER: [eds_cluster("a")],
            ENDPOINT: [endpoints("a", 1001)],
        },
        version="7",
        node_id=node_id,
    )
