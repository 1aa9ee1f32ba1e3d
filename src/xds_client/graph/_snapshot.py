"""An immutable, complete view of one listener's configuration: what ``watch_config`` yields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from google.protobuf.message import Message

from xds_client.errors import UsageError

from ._filter_chains import Connection, FilterChainChoice, select_filter_chain
from ._routing import Headers, RouteChoice, TlsFacts, _normalize_headers, select_route

__all__ = ["ConfigSnapshot", "HttpManager", "Kind", "ResourceKey", "ResourceStatus"]

Kind = Literal["lds", "rds", "cds", "eds"]
"""The four resource types of the graph, by their short names."""


class ResourceKey(NamedTuple):
    """One resource of the graph (a named tuple: hashed in C, sorts by kind then name)."""

    kind: Kind
    """``lds``, ``rds``, ``cds`` or ``eds``."""
    name: str
    """Resource name."""

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True, slots=True)
class ResourceStatus:
    """What the graph knows of one resource."""

    key: ResourceKey
    """Which resource."""
    state: Literal["ok", "does_not_exist", "removed", "nacked"]
    """``ok`` (a value arrived), ``does_not_exist`` (the timer fired), ``removed`` (the
    server deleted it or its TTL ran out) or ``nacked`` (the last update was rejected;
    ``resource`` then holds the last good value, if any)."""
    version: str | None = None
    """Version of the value in use."""
    resource: Message | None = field(default=None, repr=False)
    """The value in use, if any."""
    error: str | None = None
    """Why there is no (current) value; None when ``ok``."""


@dataclass(frozen=True, slots=True)
class HttpManager:
    """One HttpConnectionManager of the listener and the route configuration it uses."""

    filter_chain: str | None
    """Name of the filter chain holding it; None for an api_listener (gRPC client side),
    ``"default"`` for an unnamed ``default_filter_chain``."""
    filter_chain_index: int | None
    """Position in ``filter_chains``; None for the api_listener or the default chain."""
    route_config: str | None
    """Name of the RouteConfiguration (for RDS), or of the inline one."""
    inline: bool
    """True when the route configuration is inline in the listener."""
    scoped: tuple[str, ...] = ()
    """Route configurations named by inline scoped routes, in order."""
    error: str | None = None
    """Why no route configuration can be followed (e.g. ``scoped_rds``)."""
    scope_keys: tuple[tuple[str, ...], ...] = ()
    """The key of each scope in ``scoped`` (its fragments' ``string_key``)."""
    scope_key_builder: Message | None = field(default=None, repr=False)
    """How a request's scope key is built from its headers (``ScopeKeyBuilder``)."""
    strip_any_host_port: bool = False
    """The manager's ``strip_any_host_port``: the Host's port is ignored for matching."""

    def scope_for(self, headers: Mapping[str, Sequence[str]]) -> str | None:
        """The route configuration of the scope whose key the request's headers build
        (Envoy's scoped routes), or None when no scope matches (Envoy answers 404)."""
        builder: Any = self.scope_key_builder
        if builder is None:
            return None
        fragments: list[str] = []
        for fragment in builder.fragments:
            value = _extract(fragment.header_value_extractor, headers)
            if value is None:
                return None
            fragments.append(value)
        for name, key in zip(self.scoped, self.scope_keys, strict=True):
            if key == tuple(fragments):
                return name
        return None


def _extract(extractor: Any, headers: Mapping[str, Sequence[str]]) -> str | None:
    """One fragment of a scope key: a header, or one element of it (Envoy's rules)."""
    values = headers.get(extractor.name.lower())
    if not values:
        return None
    value = ",".join(values)
    separator = extractor.element_separator
    if extractor.HasField("element"):
        for element in value.split(separator) if separator else [value]:
            key, found, rest = element.partition(extractor.element.separator)
            if found and key == extractor.element.key:
                return rest
        return None
    parts = value.split(separator) if separator else [value]
    return parts[extractor.index] if extractor.index < len(parts) else None


@dataclass(frozen=True, slots=True, eq=False)
class ConfigSnapshot:
    """Everything reachable from one listener, every piece either present or known missing.

    A snapshot is delivered only when no dependency is still awaited, so it never
    mixes a new route configuration with clusters that have not arrived yet (gRFC
    A74's "config tears"). It is immutable; a change produces a new snapshot.
    """

    listener_name: str
    """The watched listener."""
    listener: Message | None
    """The Listener, or None when it does not exist (see ``errors``)."""
    http_managers: tuple[HttpManager, ...]
    """HttpConnectionManagers of the listener: one for an api_listener, one per
    filter chain holding one for a server listener (gRFC A36)."""
    route_configs: Mapping[str, Message]
    """Route configurations by name (RDS or inline)."""
    clusters: Mapping[str, Message]
    """Every reachable cluster, aggregate children included."""
    endpoints: Mapping[str, Message]
    """ClusterLoadAssignments by EDS service name."""
    aggregate_children: Mapping[str, tuple[str, ...]]
    """For each aggregate cluster, its children in priority order."""
    statuses: Mapping[ResourceKey, ResourceStatus]
    """State of every resource of the graph."""
    errors: Mapping[str, str]
    """Problems by resource (``"cds:name"``): NACKs, missing resources, loops,
    depth. Empty when the whole graph is healthy."""
    generation: int = 0
    """Counts snapshots of the same watch, from 1."""

    @property
    def versions(self) -> Mapping[ResourceKey, str]:
        """The version each resource was built from."""
        return MappingProxyType(
            {k: s.version for k, s in self.statuses.items() if s.version is not None}
        )

    @property
    def ok(self) -> bool:
        """True when no resource of the graph has an error."""
        return not self.errors

    def eds_name(self, cluster: str) -> str | None:
        """The EDS service name of an EDS cluster; None for other clusters."""
        message: Any = self.clusters.get(cluster)
        if message is None or message.type != 3:  # Cluster.EDS
            return None
        return str(message.eds_cluster_config.service_name or cluster)

    def leaf_clusters(self, cluster: str) -> tuple[str, ...]:
        """The non-aggregate clusters behind ``cluster``, in priority order, without repeats."""
        found: list[str] = []

        def walk(name: str, path: tuple[str, ...]) -> None:
            if name in path:
                return
            children = self.aggregate_children.get(name)
            if children is None:
                if name in self.clusters and name not in found:
                    found.append(name)
                return
            for child in children:
                walk(child, (*path, name))

        walk(cluster, ())
        return tuple(found)

    def filter_chain(
        self, connection: Connection, *, mode: Literal["envoy", "grpc"] = "envoy"
    ) -> FilterChainChoice | None:
        """The filter chain the listener gives ``connection`` (server-side listeners)."""
        if self.listener is None:
            return None
        return select_filter_chain(self.listener, connection, mode=mode)

    def route(
        self,
        authority: str,
        path: str,
        *,
        headers: Headers | None = None,
        connection: Connection | None = None,
        random_value: int | None = None,
        internal: bool = False,
        tls: TlsFacts | None = None,
    ) -> RouteChoice | None:
        """Where a request goes: the virtual host, route and cluster(s) Envoy would pick.

        For a listener with several HttpConnectionManagers (one per filter chain),
        pass the ``connection`` so the filter chain, and so its route configuration,
        is chosen first. None when nothing matches (Envoy answers 404) or the route
        configuration is missing. ``internal`` and ``tls`` are
        :func:`~xds_client.graph.select_route`'s.
        """
        manager = self._manager_for(connection)
        if manager is None or manager.route_config is None:
            return None
        name = manager.route_config
        if manager.scoped:
            name = manager.scope_for(_normalize_headers(headers)) or ""
        config = self.route_configs.get(name)
        if config is None:
            return None
        return select_route(
            config,  # type: ignore[arg-type]
            authority,
            path,
            headers=headers,
            random_value=random_value,
            strip_port=manager.strip_any_host_port,
            internal=internal,
            tls=tls,
        )

    def _manager_for(self, connection: Connection | None) -> HttpManager | None:
        if connection is None:
            if len(self.http_managers) > 1:
                raise UsageError(
                    f"listener {self.listener_name!r} has {len(self.http_managers)} "
                    "HttpConnectionManagers (one per filter chain): pass connection= "
                    "to say which filter chain the request arrives on"
                )
            return self.http_managers[0] if self.http_managers else None
        chosen = self.filter_chain(connection)
        if chosen is None:
            return None
        for manager in self.http_managers:
            if manager.filter_chain_index == chosen.index and (
                chosen.index is not None or manager.filter_chain is not None
            ):
                return manager
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: the tree of listener -> routes -> clusters -> endpoints."""
        from ._render import snapshot_to_dict

        return snapshot_to_dict(self)

    def to_text(self) -> str:
        """The tree as text, one resource per line (what ``xds-client graph`` prints)."""
        from ._render import snapshot_to_text

        return snapshot_to_text(self)

    def _repr_svg_(self) -> str:
        from ._render import snapshot_to_svg

        return snapshot_to_svg(self)

    def _repr_html_(self) -> str:
        from html import escape

        errors = "".join(
            f"<li><code>{escape(name)}</code>: {escape(reason)}</li>"
            for name, reason in sorted(self.errors.items())
        )
        listed = f'<ul style="color:#b91c1c">{errors}</ul>' if errors else ""
        return f"<div>{self._repr_svg_()}{listed}</div>"

    def __repr__(self) -> str:
        return (
            f"ConfigSnapshot(listener={self.listener_name!r}, generation={self.generation}, "
            f"route_configs={len(self.route_configs)}, clusters={len(self.clusters)}, "
            f"endpoints={len(self.endpoints)}, errors={len(self.errors)})"
        )
