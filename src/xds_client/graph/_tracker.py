"""The dependency tracker behind ``watch_config``: sans-I/O, fed with watch events.

It knows which resources the listener's graph reaches (LDS -> RDS or inline routes ->
clusters -> aggregate children -> EDS), says which watches to open and close as the
graph changes, and builds a :class:`ConfigSnapshot` only when every reachable
resource has arrived or is known to be missing (gRFC A74's dependency manager).

Aggregate clusters follow A74 and Envoy: children are walked depth first, a cluster
already on the current path is a loop (reported on the aggregate, not followed again),
and a graph deeper than ``max_aggregate_depth`` (16) is cut there and reported.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from xds_client.protocol._events import (
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
)

from ._routing import select_virtual_host
from ._snapshot import ConfigSnapshot, HttpManager, ResourceKey, ResourceStatus

__all__ = ["ConfigTracker", "TrackerUpdate"]

MAX_AGGREGATE_DEPTH = 16
"""gRFC A74 and Envoy: deeper aggregate cluster graphs are an error."""

_HCM_TYPES = frozenset(
    {
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "envoy.config.filter.network.http_connection_manager.v2.HttpConnectionManager",
    }
)
_AGGREGATE_TYPES = frozenset(
    {
        "envoy.extensions.clusters.aggregate.v3.ClusterConfig",
        "envoy.config.cluster.aggregate.v2alpha.ClusterConfig",
    }
)
_EDS = 3  # Cluster.DiscoveryType.EDS, the same number in v2 and v3

# The message classes must be registered in the default pool before Any can be unpacked.
for _module in (
    "envoy.extensions.filters.network.http_connection_manager.v3.http_connection_manager_pb2",
    "envoy.config.filter.network.http_connection_manager.v2.http_connection_manager_pb2",
    "envoy.extensions.clusters.aggregate.v3.cluster_pb2",
    "envoy.config.cluster.aggregate.v2alpha.cluster_pb2",
):
    with contextlib.suppress(ImportError):  # xds-protos ships them; be safe anyway
        importlib.import_module(_module)


def _unpack(packed: Any) -> Any:
    """The message inside an ``Any``; raises ValueError when it cannot be decoded."""
    name = packed.type_url.rsplit("/", 1)[-1]
    try:
        descriptor = descriptor_pool.Default().FindMessageTypeByName(name)
        message = message_factory.GetMessageClass(descriptor)()
        message.ParseFromString(packed.value)
    except (KeyError, DecodeError) as exc:
        raise ValueError(f"cannot decode {name}: {exc}") from exc
    return message


@dataclass(frozen=True, slots=True)
class TrackerUpdate:
    """What the driver must do after one event."""

    subscribe: tuple[ResourceKey, ...] = ()
    """Watches to open (newly reachable resources)."""
    unsubscribe: tuple[ResourceKey, ...] = ()
    """Watches to close (no longer reachable)."""
    snapshot: ConfigSnapshot | None = None
    """A new complete snapshot, when the graph is complete and changed."""


@dataclass(slots=True)
class _Walk:
    reachable: dict[ResourceKey, None] = field(default_factory=dict)  # ordered set
    managers: list[HttpManager] = field(default_factory=list)
    route_configs: dict[str, Message] = field(default_factory=dict)
    clusters: dict[str, Message] = field(default_factory=dict)
    endpoints: dict[str, Message] = field(default_factory=dict)
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    pending: bool = False
    shared: bool = False
    """Its dicts back a delivered snapshot: a patch copies them first."""

    def reach(self, key: ResourceKey) -> bool:
        """Add ``key``; False when it was already reached."""
        if key in self.reachable:
            return False
        self.reachable[key] = None
        return True


class ConfigTracker:
    """Follows one listener's dependency graph; feed it with :meth:`receive`.

    ``start()`` returns the first subscription (the listener). Each event for a
    subscribed resource returns a :class:`TrackerUpdate`. Events for resources
    that are no longer subscribed are ignored (a late delivery after a close).
    """

    def __init__(
        self, listener_name: str, *, max_aggregate_depth: int = MAX_AGGREGATE_DEPTH,
        authority: str | None = None,
    ) -> None:  # fmt: skip
        self.listener_name = listener_name
        self.max_aggregate_depth = max_aggregate_depth
        self.authority = authority
        """With an authority, only the virtual host it selects is followed (gRFC A74);
        without, every virtual host's clusters are (Envoy, proxies, servers)."""
        self._root = ResourceKey("lds", listener_name)
        self._subscribed: set[ResourceKey] = set()
        self._status: dict[ResourceKey, ResourceStatus] = {}
        self._last_signature: object = None
        self._generation = 0
        # For the fast path: each resource's direct dependencies, and what still lacks a state.
        self._edges: dict[ResourceKey, tuple[ResourceKey, ...]] = {}
        self._aggregates: set[ResourceKey] = set()
        self._pending: set[ResourceKey] = set()
        self._changes: dict[ResourceKey, int] = {}  # bumped on every status change
        self._last_walk: _Walk | None = None
        self._due = False  # a deferred receive() left a snapshot for flush() to build

    @property
    def subscribed(self) -> frozenset[ResourceKey]:
        """Resources watched right now."""
        return frozenset(self._subscribed)

    def start(self) -> TrackerUpdate:
        """The first watch to open: the listener itself."""
        self._subscribed.add(self._root)
        self._pending.add(self._root)
        return TrackerUpdate(subscribe=(self._root,))

    def receive(self, key: ResourceKey, event: object, *, defer: bool = False) -> TrackerUpdate:
        """Apply one watch event about ``key``; other event kinds change nothing.

        With ``defer``, a snapshot the event completes is not built yet: :meth:`flush`
        builds it, once for a burst of events (every endpoint of a response). Building
        one costs time in proportion to the whole graph, so one per event made a
        response of N changed resources cost N times the graph.
        """
        if key not in self._subscribed or not self._apply(key, event):
            return TrackerUpdate()
        self._pending.discard(key)
        # Fast path: while the graph is incomplete, a route configuration or a plain
        # cluster that only adds dependencies extends the subscriptions without walking
        # the whole graph again (the initial load is then linear, not quadratic).
        old = self._edges.get(key, ())
        new = self._direct_edges(key)
        if new is None or not set(old) <= set(new):
            return self._recompute(defer)
        self._edges[key] = new
        if new == old and not self._pending and self._patch(key):
            return TrackerUpdate() if defer else self.flush()
        added = tuple(k for k in dict.fromkeys(new) if k not in self._subscribed)
        self._subscribed.update(added)
        self._pending.update(added)
        if self._pending:
            return TrackerUpdate(subscribe=added)
        return self._recompute(defer)  # complete: the full walk builds the snapshot

    def flush(self) -> TrackerUpdate:
        """The snapshot deferred ``receive()`` calls left due, if the graph is complete."""
        walk = self._last_walk
        if not self._due or walk is None or walk.pending or self._pending:
            return TrackerUpdate()
        self._due = False
        return TrackerUpdate(snapshot=self._snapshot(walk))

    # ------------------------------------------------------------------ internals

    def _apply(self, key: ResourceKey, event: object) -> bool:
        old = self._status.get(key)
        if isinstance(event, ResourceUpdated):
            if event.name != key.name and key.name not in event.aliases:
                return False
            new = ResourceStatus(key, "ok", event.version, event.resource)
        elif isinstance(event, ResourceRemoved):
            if event.name != key.name and key.name not in event.aliases:
                return False
            new = ResourceStatus(key, "removed", error=f"{event.reason.replace('_', ' ')}")
        elif isinstance(event, ResourceDoesNotExist):
            if event.name != key.name:
                return False
            new = ResourceStatus(key, "does_not_exist", error="does not exist")
        elif isinstance(event, ResponseRejected):
            reason = event.errors.get(key.name)
            if reason is None:
                return False
            # A46: the last good value stays in use; the error is reported beside it.
            kept = old.resource if old is not None else None
            version = old.version if old is not None else None
            new = ResourceStatus(key, "nacked", version, kept, f"NACKed: {reason}")
        else:
            return False
        if old == new:
            return False
        self._status[key] = new
        self._changes[key] = self._changes.get(key, 0) + 1
        return True

    def _direct_edges(self, key: ResourceKey) -> tuple[ResourceKey, ...] | None:
        """What ``key`` depends on directly; None when only a full walk can tell
        (listeners, aggregate clusters: paths, loops and depth matter there)."""
        status = self._status.get(key)
        message: Any = status.resource if status is not None else None
        if key.kind == "lds" or key in self._aggregates:
            return None
        if message is None or key.kind == "eds":
            return ()
        if key.kind == "rds":
            return tuple(ResourceKey("cds", name) for name in _clusters_of(message, self.authority))
        if message.HasField("cluster_type"):
            return None  # maybe an aggregate: let the walk decide
        if message.type == _EDS:
            return (ResourceKey("eds", message.eds_cluster_config.service_name or key.name),)
        return ()

    def _recompute(self, defer: bool = False) -> TrackerUpdate:
        walk = _Walk()
        self._walk_listener(walk)
        wanted = set(walk.reachable)
        subscribe = tuple(k for k in walk.reachable if k not in self._subscribed)
        unsubscribe = tuple(sorted(self._subscribed - wanted))
        self._subscribed = wanted
        for key in unsubscribe:
            self._status.pop(key, None)
            self._changes.pop(key, None)
            self._edges.pop(key, None)
            self._aggregates.discard(key)
        self._pending = {k for k in wanted if k not in self._status}
        for key in wanted:
            edges = self._direct_edges(key)
            if edges is not None:
                self._edges[key] = edges
        snapshot = None
        self._last_walk = walk
        self._due = not walk.pending and not subscribe
        if self._due and not defer:
            self._due = False
            snapshot = self._snapshot(walk)
        return TrackerUpdate(subscribe, unsubscribe, snapshot)

    def _patch(self, key: ResourceKey) -> bool:
        """Bring the last walk up to date without walking, when only ``key``'s content
        changed and not what it depends on (an endpoint update in a settled graph,
        typically); False when only a walk can tell. The walk's dicts are copied the
        first time after a snapshot took them, then patched in place: a burst of
        updates costs one copy, not one per update."""
        last = self._last_walk
        if last is None or last.pending or key not in last.reachable:
            return False
        status = self._status[key]
        if key.kind not in ("rds", "cds", "eds") or (
            key.kind == "rds" and key.name not in last.route_configs
        ):
            return False  # an inline route configuration is keyed by the listener
        if status.resource is None:
            return False  # a removal changes what the walk reaches: walk
        walk = last
        if last.shared:
            walk = _Walk(
                reachable=last.reachable,
                managers=last.managers,
                route_configs=dict(last.route_configs),
                clusters=dict(last.clusters),
                endpoints=dict(last.endpoints),
                children=last.children,
                errors=dict(last.errors),
            )
            self._last_walk = walk
        target = {"rds": walk.route_configs, "cds": walk.clusters, "eds": walk.endpoints}[key.kind]
        target[key.name] = status.resource
        if status.error is None:
            walk.errors.pop(str(key), None)
        else:
            walk.errors[str(key)] = status.error
        self._due = True
        return True

    def _known(self, walk: _Walk, key: ResourceKey) -> ResourceStatus | None:
        """The status of a reached key; marks the walk pending when it has none yet."""
        status = self._status.get(key)
        if status is None:
            walk.pending = True
            return None
        if status.error is not None:
            walk.errors[str(key)] = status.error
        return status

    def _walk_listener(self, walk: _Walk) -> None:
        walk.reach(self._root)
        status = self._known(walk, self._root)
        if status is None or status.resource is None:
            return
        listener: Any = status.resource
        hcms: list[tuple[str | None, int | None, Any]] = []
        if listener.HasField("api_listener"):
            hcms.append((None, None, listener.api_listener.api_listener))
        else:
            chains: list[tuple[int | None, Any]] = list(enumerate(listener.filter_chains))
            if "default_filter_chain" in listener.DESCRIPTOR.fields_by_name and listener.HasField(
                "default_filter_chain"
            ):
                chains.append((None, listener.default_filter_chain))
            for index, chain in chains:
                label = chain.name or ("default" if index is None else f"filter_chains[{index}]")
                for network_filter in chain.filters:
                    packed = network_filter.typed_config
                    if packed.type_url.rsplit("/", 1)[-1] in _HCM_TYPES:
                        hcms.append((label, index, packed))
        for label, index, packed in hcms:
            try:
                hcm = _unpack(packed)
            except ValueError as exc:
                walk.errors[str(self._root)] = f"HttpConnectionManager: {exc}"
                continue
            walk.managers.append(self._follow_hcm(walk, label, index, hcm))

    def _follow_hcm(
        self, walk: _Walk, label: str | None, index: int | None, hcm: Any
    ) -> HttpManager:
        which = hcm.WhichOneof("route_specifier")
        strip = bool(getattr(hcm, "strip_any_host_port", False))
        if which == "rds":
            name = hcm.rds.route_config_name
            self._follow_route(walk, name, None)
            return HttpManager(label, index, name, inline=False, strip_any_host_port=strip)
        if which == "route_config":
            name = hcm.route_config.name or f"{self.listener_name} (inline)"
            self._follow_route(walk, name, hcm.route_config)
            return HttpManager(label, index, name, inline=True, strip_any_host_port=strip)
        if which == "scoped_routes" and hcm.scoped_routes.HasField(
            "scoped_route_configurations_list"
        ):
            scoped = hcm.scoped_routes
            names: list[str] = []
            keys: list[tuple[str, ...]] = []
            for scope in scoped.scoped_route_configurations_list.scoped_route_configurations:
                if not scope.HasField("route_configuration"):
                    # Envoy NACKs this: inline scopes must carry their routes inline.
                    walk.errors[str(self._root)] = (
                        f"scope {scope.name!r}: fetching routes via RDS "
                        "(route_configuration_name) is not supported with inline scoped routes"
                    )
                    continue
                name = scope.route_configuration.name or f"{scope.name} (inline)"
                names.append(name)
                keys.append(tuple(f.string_key for f in scope.key.fragments))
                self._follow_route(walk, name, scope.route_configuration)
            return HttpManager(
                label, index, names[0] if names else None, True, tuple(names),
                scope_keys=tuple(keys), scope_key_builder=scoped.scope_key_builder,
                strip_any_host_port=strip,
            )  # fmt: skip
        error = f"route specifier {which!r} is not followed (scoped_rds needs SRDS)"
        walk.errors[str(self._root)] = error
        return HttpManager(label, index, None, inline=False, error=error)

    def _follow_route(self, walk: _Walk, name: str, inline: Message | None) -> None:
        if inline is None:
            key = ResourceKey("rds", name)
            if not walk.reach(key):
                return
            status = self._known(walk, key)
            if status is None or status.resource is None:
                return
            config: Any = status.resource
        else:
            config = inline
        walk.route_configs[name] = config
        if self.authority is not None and select_virtual_host(config, self.authority) is None:
            walk.errors[f"rds:{name}"] = f"no virtual host matches authority {self.authority!r}"
        for cluster in _clusters_of(config, self.authority):
            self._follow_cluster(walk, cluster, ())

    def _follow_cluster(self, walk: _Walk, name: str, path: tuple[str, ...]) -> None:
        key = ResourceKey("cds", name)
        if name in path:
            loop = " -> ".join((*path, name))
            walk.errors[f"cds:{path[-1]}"] = f"aggregate cluster loop: {loop}"
            return
        if len(path) >= self.max_aggregate_depth:
            walk.errors[f"cds:{path[-1]}"] = (
                f"aggregate cluster graph deeper than {self.max_aggregate_depth}: "
                + " -> ".join((*path, name))
            )
            return
        first = walk.reach(key)
        status = self._known(walk, key)
        if status is None or status.resource is None:
            return
        cluster: Any = status.resource
        walk.clusters[name] = cluster
        if cluster.HasField("cluster_type") and (
            cluster.cluster_type.typed_config.type_url.rsplit("/", 1)[-1] in _AGGREGATE_TYPES
        ):
            try:
                children = tuple(_unpack(cluster.cluster_type.typed_config).clusters)
            except ValueError as exc:
                walk.errors[str(key)] = f"aggregate cluster config: {exc}"
                return
            walk.children[name] = children
            self._aggregates.add(key)
            if not children:
                walk.errors[str(key)] = "aggregate cluster has no children"
            for child in children:
                self._follow_cluster(walk, child, (*path, name))
            return
        if first and cluster.type == _EDS:
            service = cluster.eds_cluster_config.service_name or name
            eds_key = ResourceKey("eds", service)
            if walk.reach(eds_key):
                eds = self._known(walk, eds_key)
                if eds is not None and eds.resource is not None:
                    walk.endpoints[service] = eds.resource

    def _snapshot(self, walk: _Walk) -> ConfigSnapshot | None:
        for name in walk.children:
            # A37: an aggregate graph must end in at least one non-aggregate cluster.
            if not _has_leaf(walk.children, name) and f"cds:{name}" not in walk.errors:
                walk.errors[f"cds:{name}"] = "aggregate cluster graph has no leaf clusters"
        statuses = {k: self._status[k] for k in walk.reachable if k in self._status}
        signature = (
            tuple((k, self._changes.get(k)) for k in statuses),
            tuple(sorted(walk.errors.items())),
        )
        if signature == self._last_signature:
            return None  # nothing the snapshot shows has changed
        self._last_signature = signature
        self._generation += 1
        walk.shared = True
        root = statuses.get(self._root)
        return ConfigSnapshot(
            listener_name=self.listener_name,
            listener=root.resource if root is not None else None,
            http_managers=tuple(walk.managers),
            route_configs=MappingProxyType(walk.route_configs),
            clusters=MappingProxyType(walk.clusters),
            endpoints=MappingProxyType(walk.endpoints),
            aggregate_children=MappingProxyType(walk.children),
            statuses=MappingProxyType(statuses),
            errors=MappingProxyType(walk.errors),
            generation=self._generation,
        )


def _has_leaf(children: dict[str, tuple[str, ...]], root: str) -> bool:
    """Whether any non-aggregate cluster lies under ``root`` (loops cut)."""
    seen: set[str] = set()
    stack = [root]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in children:
            return True
        stack.extend(children[name])
    return False


def _clusters_of(config: Any, authority: str | None = None) -> Iterable[str]:
    """Cluster names a route configuration's routes name, in order, without repeats
    (only those of the virtual host ``authority`` selects, when given)."""
    seen: dict[str, None] = {}
    if authority is None:
        vhosts = list(config.virtual_hosts)
    else:
        chosen = select_virtual_host(config, authority)
        vhosts = [] if chosen is None else [chosen]
    for vhost in vhosts:
        for route in vhost.routes:
            if not route.HasField("route"):
                continue
            action = route.route
            if action.cluster:
                seen.setdefault(action.cluster, None)
            for weighted in action.weighted_clusters.clusters:
                if weighted.name:
                    seen.setdefault(weighted.name, None)
    return seen
