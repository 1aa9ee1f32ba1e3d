"""An immutable, complete view of one listener's configuration (what ``watch_config``
yields), and its pictures: a text tree, a JSON-ready dict and a plain SVG.

All three pictures come from one tree of :class:`Node`: listener -> HttpConnectionManager
-> route configuration -> virtual host -> route -> cluster (-> aggregate children) ->
endpoints, with each endpoint's health and weights. Errors are marked (red in SVG).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from types import MappingProxyType
from typing import Any, Literal

from google.protobuf.message import Message

from xds_client.errors import UsageError

from ._filter_chains import Connection, FilterChainChoice, select_filter_chain
from ._routing import Headers, RouteChoice, TlsFacts, _normalize_headers, select_route

__all__ = [
    "ConfigSnapshot",
    "HttpManager",
    "Kind",
    "Node",
    "ResourceKey",
    "ResourceStatus",
    "snapshot_to_dict",
    "snapshot_to_svg",
    "snapshot_to_text",
    "snapshot_tree",
]

Kind = Literal["lds", "rds", "cds", "eds"]
"""The four resource types of the graph, by their short names."""


@dataclass(frozen=True, slots=True, order=True)
class ResourceKey:
    """One resource of the graph; keys sort by kind, then name."""

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
        return snapshot_to_dict(self)

    def to_text(self) -> str:
        """The tree as text, one resource per line (what ``xds-client graph`` prints)."""
        return snapshot_to_text(self)

    def _repr_svg_(self) -> str:
        return snapshot_to_svg(self)

    def _repr_html_(self) -> str:
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


# Pictures of a snapshot

_CLUSTER_TYPES = {0: "STATIC", 1: "STRICT_DNS", 2: "LOGICAL_DNS", 3: "EDS", 4: "ORIGINAL_DST"}
_HEALTH = {0: "UNKNOWN", 1: "HEALTHY", 2: "UNHEALTHY", 3: "DRAINING", 4: "TIMEOUT", 5: "DEGRADED"}


@dataclass(slots=True)
class Node:
    """One box of the picture."""

    kind: str
    """``listener``, ``filter_chain``, ``routes``, ``vhost``, ``route``, ``cluster``,
    ``endpoints`` or ``endpoint``."""
    label: str
    """What the box says."""
    version: str | None = None
    """Version of the resource, for resources."""
    error: str | None = None
    """Why this part is broken; drawn in red."""
    children: list[Node] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "label": self.label}
        if self.version is not None:
            out["version"] = self.version
        if self.error is not None:
            out["error"] = self.error
        if self.children:
            out["children"] = [c.to_dict() for c in self.children]
        return out


def _version(snapshot: ConfigSnapshot, kind: str, name: str) -> str | None:
    for key, status in snapshot.statuses.items():
        if key.kind == kind and key.name == name:
            return status.version
    return None


def _match_text(match: Any) -> str:
    kind = match.WhichOneof("path_specifier")
    if kind == "safe_regex":
        text = f"regex {match.safe_regex.regex!r}"
    elif kind is None:
        text = "(any)"
    else:
        text = f"{kind} {getattr(match, kind)!r}"
    extras = [f"header {h.name}" for h in match.headers]
    extras += [f"query {q.name}" for q in match.query_parameters]
    if match.HasField("runtime_fraction"):
        extras.append(f"{match.runtime_fraction.default_value.numerator}%")
    return text + (f" [{', '.join(extras)}]" if extras else "")


def _endpoint_nodes(assignment: Any) -> list[Node]:
    nodes: list[Node] = []
    for locality in assignment.endpoints:
        where = "/".join(p for p in (locality.locality.region, locality.locality.zone) if p)
        locality_weight = locality.load_balancing_weight.value
        for lb in locality.lb_endpoints:
            socket = lb.endpoint.address.socket_address
            health = _HEALTH.get(lb.health_status, str(lb.health_status))
            parts = [f"{socket.address}:{socket.port_value}", health]
            if lb.HasField("load_balancing_weight"):
                parts.append(f"w={lb.load_balancing_weight.value}")
            if where:
                parts.append(f"({where}" + (f" w={locality_weight})" if locality_weight else ")"))
            error = f"endpoint is {health}" if lb.health_status in (2, 4) else None
            nodes.append(Node("endpoint", " ".join(parts), error=error))
    return nodes


def _cluster_node(snapshot: ConfigSnapshot, name: str, path: tuple[str, ...]) -> Node:
    error = snapshot.errors.get(f"cds:{name}")
    cluster: Any = snapshot.clusters.get(name)
    if cluster is None or name in path:
        return Node("cluster", f"cluster {name}", _version(snapshot, "cds", name), error)
    children = snapshot.aggregate_children.get(name)
    if children is not None:
        node = Node(
            "cluster", f"cluster {name} (aggregate)", _version(snapshot, "cds", name), error
        )
        node.children = [_cluster_node(snapshot, c, (*path, name)) for c in children]
        return node
    kind = _CLUSTER_TYPES.get(cluster.type, str(cluster.type))
    node = Node("cluster", f"cluster {name} ({kind})", _version(snapshot, "cds", name), error)
    service = snapshot.eds_name(name)
    if service is not None:
        eds = Node(
            "endpoints",
            f"endpoints {service}",
            _version(snapshot, "eds", service),
            snapshot.errors.get(f"eds:{service}"),
        )
        assignment = snapshot.endpoints.get(service)
        if assignment is not None:
            eds.children = _endpoint_nodes(assignment)
        node.children.append(eds)
    elif cluster.HasField("load_assignment"):
        node.children = _endpoint_nodes(cluster.load_assignment)
    return node


def _action_nodes(snapshot: ConfigSnapshot, route: Any) -> tuple[str, list[Node]]:
    action = route.WhichOneof("action")
    if action != "route":
        return f" -> {action}", []
    target = route.route
    if target.cluster:
        return "", [_cluster_node(snapshot, target.cluster, ())]
    if target.weighted_clusters.clusters:
        nodes = []
        for weighted in target.weighted_clusters.clusters:
            node = _cluster_node(snapshot, weighted.name, ())
            node.label += f" [weight {weighted.weight.value}]"
            nodes.append(node)
        return "", nodes
    if target.cluster_header:
        return f" -> cluster from header {target.cluster_header!r}", []
    return " -> cluster specifier plugin", []


def snapshot_tree(snapshot: ConfigSnapshot) -> Node:
    """The snapshot as a tree of :class:`Node`."""
    name = snapshot.listener_name
    root = Node(
        "listener",
        f"listener {name}",
        _version(snapshot, "lds", name),
        snapshot.errors.get(f"lds:{name}"),
    )
    for manager in snapshot.http_managers:
        parent = root
        if manager.filter_chain is not None:
            parent = Node("filter_chain", f"filter chain {manager.filter_chain}")
            root.children.append(parent)
        names = manager.scoped or ((manager.route_config,) if manager.route_config else ())
        if manager.error is not None:
            parent.children.append(Node("routes", "routes", error=manager.error))
        for route_name in names:
            version = None if manager.inline else _version(snapshot, "rds", route_name)
            label = f"routes {route_name}" + (" (inline)" if manager.inline else "")
            routes = Node("routes", label, version, snapshot.errors.get(f"rds:{route_name}"))
            parent.children.append(routes)
            config: Any = snapshot.route_configs.get(route_name)
            if config is None:
                continue
            for vhost in config.virtual_hosts:
                vnode = Node("vhost", f"vhost {vhost.name} [{', '.join(vhost.domains)}]")
                routes.children.append(vnode)
                for route in vhost.routes:
                    suffix, targets = _action_nodes(snapshot, route)
                    vnode.children.append(
                        Node("route", _match_text(route.match) + suffix, children=targets)
                    )
    return root


def snapshot_to_dict(snapshot: ConfigSnapshot) -> dict[str, Any]:
    """JSON-ready: the tree plus the versions and errors of every resource."""
    return {
        "listener": snapshot.listener_name,
        "generation": snapshot.generation,
        "complete": True,
        "versions": {str(k): v for k, v in sorted(snapshot.versions.items())},
        "errors": dict(sorted(snapshot.errors.items())),
        "tree": snapshot_tree(snapshot).to_dict(),
    }


def snapshot_to_text(snapshot: ConfigSnapshot) -> str:
    """A tree drawn with box characters; errors marked ``!!``."""
    lines: list[str] = []

    def line(node: Node) -> str:
        text = node.label
        if node.version is not None:
            text += f"  (v{node.version})"
        if node.error is not None:
            text += f"  !! {node.error}"
        return text

    def walk(node: Node, prefix: str) -> None:
        for index, child in enumerate(node.children):
            last = index == len(node.children) - 1
            lines.append(prefix + ("└─ " if last else "├─ ") + line(child))
            walk(child, prefix + ("   " if last else "│  "))

    tree = snapshot_tree(snapshot)
    lines.append(line(tree))
    walk(tree, "")
    return "\n".join(lines) + "\n"


_GAP = 28.0
_ROW = 26
_BOX_HEIGHT = 20
_CHAR = 6.7  # glyph width of 11px monospace (0.6 em, with a margin): boxes fit their text
_REASON_HEIGHT = 14  # a broken node's second line: why it is broken
_FILL = {
    "listener": "#dbeafe",
    "filter_chain": "#e0e7ff",
    "routes": "#dcfce7",
    "vhost": "#f0fdf4",
    "route": "#f8fafc",
    "cluster": "#fef9c3",
    "endpoints": "#ffedd5",
    "endpoint": "#fff7ed",
}


def _box_text(node: Node) -> str:
    return node.label + (f" v{node.version}" if node.version is not None else "")


def _reason_text(node: Node) -> str:
    return f"!! {node.error}" if node.error is not None else ""


def snapshot_to_svg(snapshot: ConfigSnapshot) -> str:
    """A left-to-right tree as a standalone SVG document; broken parts in red."""
    placed: list[tuple[Node, int, float]] = []  # node, depth, row
    edges: list[tuple[int, float, int, float]] = []
    rows = 0

    def place(node: Node, depth: int) -> float:
        nonlocal rows
        if not node.children:
            row = float(rows)
            rows += 2 if node.error is not None else 1  # room for the reason's line
        else:
            child_rows = [place(c, depth + 1) for c in node.children]
            row = (child_rows[0] + child_rows[-1]) / 2
            edges.extend((depth, row, depth + 1, r) for r in child_rows)
        placed.append((node, depth, row))
        return row

    place(snapshot_tree(snapshot), 0)
    depth = max(d for _, d, _ in placed) + 1
    # Each column is as wide as its longest label (and reason): nothing is cut, so a
    # version at the end of a long name stays visible.
    boxes = [0.0] * depth
    for node, d, _ in placed:
        longest = max(len(_box_text(node)), len(_reason_text(node)))
        boxes[d] = max(boxes[d], longest * _CHAR + 14)
    lefts = [10.0]
    for box in boxes[:-1]:
        lefts.append(lefts[-1] + box + _GAP)
    width = int(lefts[-1] + boxes[-1] + 10)
    height = rows * _ROW + 20
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace" font-size="11">',
        f"<title>config graph of listener {escape(snapshot.listener_name)}</title>",
    ]
    for d1, r1, d2, r2 in edges:
        x1 = lefts[d1] + boxes[d1]
        x2 = lefts[d2]
        y1 = 10 + r1 * _ROW + _BOX_HEIGHT / 2
        y2 = 10 + r2 * _ROW + _BOX_HEIGHT / 2
        middle = (x1 + x2) / 2
        out.append(
            f'<path d="M{x1:.0f},{y1:.0f} C{middle:.0f},{y1:.0f} {middle:.0f},{y2:.0f} '
            f'{x2:.0f},{y2:.0f}" fill="none" stroke="#94a3b8"/>'
        )
    for node, d, row in sorted(placed, key=lambda p: (p[1], p[2])):
        x = lefts[d]
        y = 10 + row * _ROW
        text = _box_text(node)
        broken = node.error is not None
        fill = "#fee2e2" if broken else _FILL.get(node.kind, "#ffffff")
        stroke = "#dc2626" if broken else "#64748b"
        tooltip = escape(text + (f" — {node.error}" if broken else ""))
        height = _BOX_HEIGHT + (_REASON_HEIGHT if broken else 0)
        reason = (
            f'<text x="{x + 7:.0f}" y="{y + 14 + _REASON_HEIGHT:.0f}" fill="#b91c1c">'
            f"{escape(_reason_text(node))}</text>"
            if broken
            else ""
        )
        out.append(
            f'<g><title>{tooltip}</title><rect x="{x:.0f}" y="{y:.0f}" width="{boxes[d]:.0f}" '
            f'height="{height}" rx="4" fill="{fill}" stroke="{stroke}"/>'
            f'<text x="{x + 7:.0f}" y="{y + 14:.0f}" fill="{"#b91c1c" if broken else "#0f172a"}">'
            f"{escape(text)}</text>{reason}</g>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
