"""Small builders of the four resource types for the graph tests."""

from __future__ import annotations

from typing import Any

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.listener.v3.listener_components_pb2 import (
    Filter,
    FilterChain,
    FilterChainMatch,
)
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.config.route.v3.route_components_pb2 import (
    Route,
    RouteAction,
    RouteMatch,
    VirtualHost,
    WeightedCluster,
)
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.clusters.aggregate.v3.cluster_pb2 import ClusterConfig  # type: ignore[import-untyped]
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.wrappers_pb2 import UInt32Value

from tests.interop._interop_helpers import (
    HCM_TYPE_URL,
    _packed_hcm,
    ads_source,
    api_listener,
    endpoints,
    hcm,
)

__all__ = [
    "aggregate",
    "api_listener",
    "eds_cluster",
    "endpoints",
    "inline_listener",
    "routes",
    "scoped_hcm",
    "scoped_listener",
    "server_listener",
    "static_cluster",
]


def routes(name: str, *clusters: str, weighted: tuple[str, ...] = ()) -> RouteConfiguration:
    """One virtual host: a route per cluster (prefix ``/<cluster>``), plus one weighted route."""
    route_list = [
        Route(match=RouteMatch(prefix=f"/{c}"), route=RouteAction(cluster=c)) for c in clusters
    ]
    if weighted:
        route_list.append(
            Route(
                match=RouteMatch(prefix="/w"),
                route=RouteAction(
                    weighted_clusters=WeightedCluster(
                        clusters=[
                            WeightedCluster.ClusterWeight(name=c, weight=UInt32Value(value=10))
                            for c in weighted
                        ]
                    )
                ),
            )
        )
    return RouteConfiguration(
        name=name, virtual_hosts=[VirtualHost(name="vh", domains=["*"], routes=route_list)]
    )


def eds_cluster(name: str, service: str = "") -> Cluster:
    cluster = Cluster(name=name, type=Cluster.EDS)
    cluster.eds_cluster_config.eds_config.CopyFrom(ads_source())
    cluster.eds_cluster_config.service_name = service
    return cluster


def static_cluster(name: str) -> Cluster:
    return Cluster(name=name, type=Cluster.STATIC)


def aggregate(name: str, *children: str) -> Cluster:
    config = ClusterConfig(clusters=list(children))
    return Cluster(
        name=name,
        cluster_type=Cluster.CustomClusterType(
            name="envoy.clusters.aggregate",
            typed_config=AnyProto(
                type_url="type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig",
                value=config.SerializeToString(),
            ),
        ),
    )


def inline_listener(name: str, config: RouteConfiguration) -> Listener:
    manager = hcm("unused")
    manager.ClearField("rds")
    manager.route_config.CopyFrom(config)
    packed = AnyProto(type_url=HCM_TYPE_URL, value=manager.SerializeToString())
    listener = Listener(name=name)
    listener.api_listener.api_listener.CopyFrom(packed)
    return listener


def server_listener(name: str, chains: dict[str, tuple[int, str]], default: str) -> Listener:
    """A gRFC A36 server listener: per chain name, (source port, route config name)."""

    def chain(chain_name: str, route_name: str, port: int | None) -> FilterChain:
        match = FilterChainMatch(source_ports=[port]) if port is not None else None
        return FilterChain(
            name=chain_name,
            filter_chain_match=match,
            filters=[
                Filter(
                    name="envoy.filters.network.http_connection_manager",
                    typed_config=_packed_hcm(route_name),
                )
            ],
        )

    return Listener(
        name=name,
        filter_chains=[chain(n, r, p) for n, (p, r) in chains.items()],
        default_filter_chain=chain("fallback", default, None),
    )


def scoped_listener(name: str, scopes: dict[str, RouteConfiguration]) -> Listener:
    """An api_listener with inline scoped routes: scope key (from the ``addr`` header's
    ``x-foo-key`` element, as in Envoy's docs) -> its inline route configuration."""
    listener = Listener(name=name)
    listener.api_listener.api_listener.CopyFrom(
        AnyProto(type_url=HCM_TYPE_URL, value=scoped_hcm(scopes).SerializeToString())
    )
    return listener


def scoped_hcm(scopes: dict[str, RouteConfiguration]) -> Any:
    """An HttpConnectionManager with the inline scoped routes of :func:`scoped_listener`."""
    from envoy.config.route.v3.scoped_route_pb2 import ScopedRouteConfiguration
    from envoy.extensions.filters.network.http_connection_manager.v3.http_connection_manager_pb2 import (  # noqa: E501
        ScopedRouteConfigurationsList,
        ScopedRoutes,
    )

    builder = ScopedRoutes.ScopeKeyBuilder.FragmentBuilder
    manager = hcm("unused")
    manager.ClearField("rds")
    manager.scoped_routes.CopyFrom(
        ScopedRoutes(
            name="scopes",
            scope_key_builder=ScopedRoutes.ScopeKeyBuilder(
                fragments=[
                    builder(
                        header_value_extractor=builder.HeaderValueExtractor(
                            name="addr",
                            element_separator=";",
                            element=builder.HeaderValueExtractor.KvElement(
                                separator="=", key="x-foo-key"
                            ),
                        )
                    )
                ]
            ),
            rds_config_source=ads_source(),
            scoped_route_configurations_list=ScopedRouteConfigurationsList(
                scoped_route_configurations=[
                    ScopedRouteConfiguration(
                        name=f"scope-{key}",
                        route_configuration=route,
                        key=ScopedRouteConfiguration.Key(
                            fragments=[ScopedRouteConfiguration.Key.Fragment(string_key=key)]
                        ),
                    )
                    for key, route in scopes.items()
                ]
            ),
        )
    )
    return manager
