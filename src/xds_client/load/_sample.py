"""A sample configuration for load runs: one listener, its routes, N clusters, endpoints.

The same set serves both profiles: the listener is an ``api_listener`` whose
HttpConnectionManager names its RouteConfiguration over RDS (what a gRPC client
needs, and what Envoy follows too), the route sends one prefix to each cluster, and
every cluster is an EDS cluster over ADS with its own ClusterLoadAssignment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.filters.http.router.v3.router_pb2 import (  # type: ignore[import-untyped]
    Router,
)
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["SAMPLE_LISTENER", "cluster_name", "sample_config", "sample_endpoints"]

SAMPLE_LISTENER = "load.example.com"
"""The listener's name: the target a gRPC client asks for (``xds:///load.example.com``)."""
SAMPLE_ROUTE = "load-routes"


def cluster_name(i: int) -> str:
    """The name of cluster ``i`` (and of its endpoints)."""
    return f"cluster-{i:04d}"


def sample_endpoints(clusters: int, *, endpoints: int = 3, revision: int = 0) -> list[Message]:
    """One ClusterLoadAssignment per cluster; ``revision`` moves every port (a push)."""

    out: list[Message] = []
    for i in range(clusters):
        assignment = ClusterLoadAssignment(cluster_name=cluster_name(i))
        locality = assignment.endpoints.add()
        locality.locality.region = "region-1"
        locality.locality.zone = f"zone-{i % 3}"
        locality.load_balancing_weight.value = 1
        for j in range(endpoints):
            lb = locality.lb_endpoints.add()
            lb.load_balancing_weight.value = 1
            socket = lb.endpoint.address.socket_address
            socket.address = f"10.{i // 250}.{i % 250}.{j + 1}"
            socket.port_value = 8000 + (revision % 1000)
        out.append(assignment)
    return out


def sample_config(
    clusters: int = 50, *, endpoints: int = 3, revision: int = 0, listener: str = SAMPLE_LISTENER
) -> dict[str, list[Message]]:
    """The resources by type alias (``lds``, ``rds``, ``cds``, ``eds``), ready for
    :meth:`~xds_client.testing.ControlPlane.set_snapshot`."""

    manager = hcm_pb2.HttpConnectionManager(stat_prefix="load")
    manager.rds.route_config_name = SAMPLE_ROUTE
    manager.rds.config_source.ads.SetInParent()
    router = manager.http_filters.add(name="envoy.filters.http.router")
    router.typed_config.Pack(Router())
    lds = Listener(name=listener)
    lds.api_listener.api_listener.Pack(manager)

    route = RouteConfiguration(name=SAMPLE_ROUTE)
    host = route.virtual_hosts.add(name="load", domains=["*"])
    cds: list[Message] = []
    for i in range(clusters):
        name = cluster_name(i)
        entry = host.routes.add()
        entry.match.prefix = f"/{name}/"
        entry.route.cluster = name
        cluster = Cluster(name=name, type=Cluster.EDS, lb_policy=Cluster.ROUND_ROBIN)
        cluster.connect_timeout.FromMilliseconds(1000)
        cluster.eds_cluster_config.eds_config.ads.SetInParent()
        cds.append(cluster)
    return {
        "lds": [lds],
        "rds": [route],
        "cds": cds,
        "eds": sample_endpoints(clusters, endpoints=endpoints, revision=revision),
    }
