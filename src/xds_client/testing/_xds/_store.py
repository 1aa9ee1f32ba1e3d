"""Snapshots of resources, like go-control-plane's snapshot cache.

Each type URL has an immutable :class:`TypeSnapshot` (a version and the
resources by name). Mutations replace the snapshot and tell the listeners
which types changed, so stream handlers never see half-applied updates.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import Message

from xds_client.errors import UsageError
from xds_client.resources import ENDPOINT, V2_ENDPOINT, ResourceType, resource_type

__all__ = [
    "Entry",
    "ResourceInput",
    "ResourcesInput",
    "SnapshotInput",
    "Store",
    "TypeSnapshot",
    "TypeSpec",
    "resource_name",
]

TypeSpec: TypeAlias = "str | ResourceType[Any] | type[Message]"
"""A resource type as :func:`xds_client.resources.resource_type` accepts it."""

ResourceInput: TypeAlias = "Message | AnyProto | bytes"
"""A resource: a message, an ``Any`` sent as it is, or serialized bytes."""

ResourcesInput: TypeAlias = "Mapping[str, ResourceInput] | Iterable[Message]"
"""Resources by name, or messages whose name is read from them."""

# Keys are TypeSpec values, checked at run time. Mapping keys are invariant,
# so Mapping[TypeSpec, ...] would refuse a plain dict[str, ...]; a union of
# key types would stop mypy from inferring dict literals. Any keeps both working.
SnapshotInput: TypeAlias = "Mapping[Any, ResourcesInput]"
"""Resources by type (alias, type URL, message class or ResourceType)."""


@dataclass(frozen=True)
class Entry:
    """One resource as the control plane serves it."""

    name: str
    """The resource name."""
    body: AnyProto
    """The resource packed in an ``Any`` with the type's URL."""
    version: str
    """Per-resource version (delta and wrappers): given, or a hash of the bytes."""
    ttl: float | None = None
    """Time to live in seconds; the resource is wrapped and heartbeats refresh it."""


@dataclass(frozen=True)
class TypeSnapshot:
    """The resources of one type at one version."""

    version: str = ""
    """The type's ``version_info``; empty until something is set."""
    entries: Mapping[str, Entry] = field(default_factory=dict)
    """Resources by name."""
    is_set: bool = False
    """False while nothing was ever set for the type (SotW then stays silent)."""


def resource_name(message: Message) -> str:
    """The name a resource is known by: ``name``, or ``cluster_name`` for endpoints."""
    for field_name in ("name", "cluster_name"):
        if field_name in message.DESCRIPTOR.fields_by_name:
            value = getattr(message, field_name)
            if isinstance(value, str) and value:
                return value
    raise UsageError(
        f"cannot tell the name of a {message.DESCRIPTOR.full_name}: "
        "pass resources as a {name: message} mapping"
    )


def _pack(type_url: str, resource: ResourceInput) -> AnyProto:
    if isinstance(resource, AnyProto):
        return resource
    if isinstance(resource, bytes):
        return AnyProto(type_url=type_url, value=resource)
    # Pack under the type's URL, not the message's own name: a v3 message
    # then serves a v2 type too, since their wire formats agree.
    return AnyProto(type_url=type_url, value=resource.SerializeToString(deterministic=True))


def _content_version(body: AnyProto) -> str:
    return hashlib.sha256(body.type_url.encode() + b"\0" + body.value).hexdigest()[:16]


def entries_from(
    type_url: str,
    resources: ResourcesInput,
    *,
    ttl: float | None = None,
    versions: Mapping[str, str] | None = None,
) -> dict[str, Entry]:
    """Normalise user input into entries (names, packed bodies, versions)."""
    if isinstance(resources, Mapping):
        pairs: list[tuple[str, ResourceInput]] = list(resources.items())
    else:
        pairs = [(resource_name(message), message) for message in resources]
    out: dict[str, Entry] = {}
    for name, resource in pairs:
        if name in out:
            raise UsageError(f"resource {name!r} of {type_url} is given twice")
        body = _pack(type_url, resource)
        version = (versions or {}).get(name) or _content_version(body)
        out[name] = Entry(name, body, version, ttl)
    return out


class Store:
    """Resources per node id (None = every node) and type URL, with change listeners."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshots: dict[tuple[str | None, str], TypeSnapshot] = {}
        self._counter = itertools.count(1)
        self._listeners: list[Callable[[str | None, frozenset[str]], None]] = []

    def add_listener(self, listener: Callable[[str | None, frozenset[str]], None]) -> None:
        """Call ``listener(node_id, type_urls)`` after every change."""
        with self._lock:
            self._listeners.append(listener)

    def view(self, node_id: str | None, type_url: str) -> TypeSnapshot:
        """What a node sees: its own snapshot of the type, else the shared one."""
        with self._lock:
            if node_id is not None:
                own = self._snapshots.get((node_id, type_url))
                if own is not None:
                    return own
            return self._snapshots.get((None, type_url), TypeSnapshot())

    def apply(
        self,
        node_id: str | None,
        changes: Mapping[str, Callable[[dict[str, Entry]], None]],
        version: str | None,
    ) -> str:
        """Run each type's edit on a copy of its entries, then publish all at once.

        Returns the version given to the changed types (``version`` or the
        next number of a counter shared by every type).
        """
        with self._lock:
            new_version = version if version is not None else self._next_version(changes)
            for type_url, edit in changes.items():
                old = self._snapshots.get((node_id, type_url))
                if old is None and node_id is not None:
                    # A node's first own snapshot starts from what it saw before.
                    old = self._snapshots.get((None, type_url))
                entries = dict(old.entries) if old is not None else {}
                edit(entries)
                self._snapshots[(node_id, type_url)] = TypeSnapshot(new_version, entries, True)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(node_id, frozenset(changes))
        return new_version

    def _next_version(self, type_urls: Mapping[str, object]) -> str:
        # A counted version must differ from the current one of every changed type,
        # even when a caller chose that number explicitly before: a client seeing the
        # same version_info again would rightly treat the push as unchanged.
        taken = {snap.version for key, snap in self._snapshots.items() if key[1] in type_urls}
        candidate = str(next(self._counter))
        while candidate in taken:
            candidate = str(next(self._counter))
        return candidate

    def clear_node(self, node_id: str) -> None:
        """Forget a node's own snapshots; it sees the shared ones again."""
        with self._lock:
            gone = [key for key in self._snapshots if key[0] == node_id]
            for key in gone:
                del self._snapshots[key]
            listeners = list(self._listeners)
        for listener in listeners:
            listener(node_id, frozenset(key[1] for key in gone))


def endpoints_type_for(cluster_type_url: str) -> str | None:
    """The EDS type to push together with a CDS type (Envoy waits for it to ACK CDS)."""
    cds = resource_type(cluster_type_url)
    if cds.alias != "cds":
        return None
    return ENDPOINT if cds.api_version == "v3" else V2_ENDPOINT
