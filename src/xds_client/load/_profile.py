"""How a simulated client subscribes: as Envoy does, or as a gRPC client does.

``envoy``: LDS and CDS by wildcard, then RDS for the route configurations the
listeners name and EDS for the EDS clusters. ``grpc``: LDS for one listener by
name, then RDS, then CDS for the clusters its routes name, then EDS (gRFC A27).

Following references needs the messages, but every client of a fleet receives the
same bytes: :class:`References` decodes each distinct resource once and remembers
what it names, so a thousand clients cost one decode (the config graph's job,
done for the few fields a subscription needs).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from xds_client.resources import resource_type

__all__ = ["CDS", "EDS", "LDS", "RDS", "Profile", "References"]

Profile = Literal["envoy", "grpc"]

LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
RDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
_HCM = (
    "type.googleapis.com/"
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

Refs = tuple[tuple[str, tuple[str, ...]], ...]
"""What one resource names: (type URL, names) pairs."""

_MEMO_LIMIT = 200_000


class References:
    """What each resource names, decoded once per distinct serialized resource."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, bytes], Refs] = {}
        self.decodes = 0
        """How many resources were decoded (a measure of the memo's work)."""

    def of(self, type_url: str, raw: bytes) -> Refs:
        """The names ``raw`` (a serialized resource of ``type_url``) refers to."""
        key = (type_url, raw)
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            found = self._memo[key] = _decode_refs(type_url, raw)
            self.decodes += 1
        return found

    def wanted(self, type_url: str, raws: Iterable[bytes]) -> dict[str, set[str]]:
        """Union of the names the given resources of one type refer to, by type URL."""
        out: dict[str, set[str]] = {}
        for raw in raws:
            for target, names in self.of(type_url, raw):
                out.setdefault(target, set()).update(names)
        return out


def _decode_refs(type_url: str, raw: bytes) -> Refs:
    message = resource_type(type_url).message_class.FromString(raw)
    if type_url == LDS:
        return _listener_refs(message)
    if type_url == RDS:
        return ((CDS, tuple(sorted(_route_clusters(message)))),)
    if type_url == CDS:
        return _cluster_refs(message)
    return ()


def _listener_refs(listener: object) -> Refs:

    assert isinstance(listener, Listener)
    managers = []
    if listener.HasField("api_listener"):
        managers.append(listener.api_listener.api_listener)
    chains = [*listener.filter_chains]
    if listener.HasField("default_filter_chain"):
        chains.append(listener.default_filter_chain)
    managers += [f.typed_config for c in chains for f in c.filters if f.HasField("typed_config")]
    routes: set[str] = set()
    clusters: set[str] = set()
    for packed in managers:
        if packed.type_url != _HCM:
            continue
        manager = hcm_pb2.HttpConnectionManager.FromString(packed.value)
        if manager.HasField("rds"):
            routes.add(manager.rds.route_config_name)
        elif manager.HasField("route_config"):
            clusters |= _route_clusters(manager.route_config)
    refs: list[tuple[str, tuple[str, ...]]] = [(RDS, tuple(sorted(routes)))]
    if clusters:
        refs.append((CDS, tuple(sorted(clusters))))
    return tuple(refs)


def _route_clusters(config: object) -> set[str]:

    assert isinstance(config, RouteConfiguration)
    names: set[str] = set()
    for host in config.virtual_hosts:
        for route in host.routes:
            if not route.HasField("route"):
                continue
            action = route.route
            if action.cluster:
                names.add(action.cluster)
            names.update(w.name for w in action.weighted_clusters.clusters)
    return names


def _cluster_refs(cluster: object) -> Refs:

    assert isinstance(cluster, Cluster)
    if cluster.type != Cluster.EDS:
        return ()
    return ((EDS, (cluster.eds_cluster_config.service_name or cluster.name,)),)
