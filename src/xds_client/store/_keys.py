"""Keys, stored objects and JSON helpers of the ResourceStore client."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from xds_client._tables import object_html
from xds_client.errors import UsageError
from xds_client.store._proto import resource_pb2 as pb

__all__ = ["ResourceKey", "StoredObject", "Value"]

Value: TypeAlias = "bytes | Mapping[str, Any]"
"""What writes accept: JSON bytes, or a mapping that is encoded as JSON."""


@dataclass(frozen=True, slots=True)
class ResourceKey:
    """Where a resource lives: group, resource type, namespace (tenant) and name.

    A key with an empty ``name`` is a prefix, as ``list`` and ``watch`` take.
    """

    group: str
    """API group, e.g. ``dashboard.grafana.app``."""
    resource: str
    """Plural resource type, e.g. ``dashboards``."""
    namespace: str = ""
    """Namespace (tenant); empty for cluster-scoped resources or for all namespaces."""
    name: str = ""
    """Name, unique within group, resource and namespace; empty for a prefix."""

    def to_proto(self) -> pb.ResourceKey:
        """The wire form."""
        return pb.ResourceKey(
            group=self.group, resource=self.resource, namespace=self.namespace, name=self.name
        )

    @classmethod
    def from_proto(cls, key: pb.ResourceKey) -> ResourceKey:
        """Build from the wire form."""
        return cls(key.group, key.resource, key.namespace, key.name)

    def with_name(self, name: str, namespace: str | None = None) -> ResourceKey:
        """This prefix with a name (and optionally another namespace)."""
        ns = self.namespace if namespace is None else namespace
        return ResourceKey(self.group, self.resource, ns, name)

    def prefix(self) -> ResourceKey:
        """This key without its name."""
        return ResourceKey(self.group, self.resource, self.namespace)

    def __str__(self) -> str:
        parts = [self.group, self.resource]
        if self.namespace:
            parts.append(self.namespace)
        if self.name:
            parts.append(self.name)
        return "/".join(parts)


def require_name(key: ResourceKey) -> None:
    """Reject a prefix where a full key is needed (a local usage error)."""
    if not key.group or not key.resource or not key.name:
        raise UsageError(f"a full key (group, resource and name) is required, got {key!r}")


def encode_value(key: ResourceKey, value: Value) -> bytes:
    """JSON bytes for a write.

    Bytes pass through untouched. A mapping gets ``metadata.name`` and
    ``metadata.namespace`` from the key when it does not set them (the server
    requires them to match the key); the caller's mapping is not modified.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if not isinstance(value, Mapping):
        raise UsageError(f"a value must be bytes or a mapping, got {type(value).__name__}")
    doc = dict(value)
    meta_in = doc.get("metadata")
    meta: dict[str, Any] = dict(meta_in) if isinstance(meta_in, Mapping) else {}
    meta.setdefault("name", key.name)
    if key.namespace:
        meta.setdefault("namespace", key.namespace)
    doc["metadata"] = meta
    return json.dumps(doc, separators=(",", ":")).encode()


def metadata_of(doc: object) -> Mapping[str, Any]:
    """The ``metadata`` mapping of a decoded object, or an empty one."""
    if isinstance(doc, dict):
        meta = doc.get("metadata")
        if isinstance(meta, dict):
            return meta
    return {}


def labels_of(doc: object) -> Mapping[str, str]:
    """``metadata.labels`` of a decoded object (non-string values are ignored)."""
    labels = metadata_of(doc).get("labels")
    if isinstance(labels, dict):
        return {k: v for k, v in labels.items() if isinstance(v, str)}
    return {}


def key_from_doc(prefix: ResourceKey, doc: object) -> ResourceKey:
    """The key of an object: group and resource of the prefix, namespace and name from JSON."""
    meta = metadata_of(doc)
    name = meta.get("name")
    namespace = meta.get("namespace")
    if not isinstance(namespace, str) or namespace == prefix.namespace:
        # The prefix's own string: a cache of N objects of one namespace keeps one
        # copy of it, not N equal strings decoded from N documents.
        namespace = prefix.namespace
    return ResourceKey(
        prefix.group, prefix.resource, namespace, name if isinstance(name, str) else ""
    )


class StoredObject:
    """A resource as stored: its key, resource version and JSON bytes.

    ``json()`` decodes on demand (and caches), so listing many objects costs no
    JSON work unless the caller asks for it. Instances are immutable.
    """

    __slots__ = ("_doc", "_key", "_prefix", "_rv", "_value")

    def __init__(
        self,
        resource_version: int,
        value: bytes,
        key: ResourceKey | None = None,
        prefix: ResourceKey | None = None,
    ) -> None:
        self._rv = resource_version
        self._value = value
        # A ResourceKey; None for a listed object (its key comes from the JSON); or,
        # for an informer's object, only its name under ``prefix`` (see ObjectTable).
        self._key: ResourceKey | str | None = key
        self._prefix = prefix
        self._doc: Any = _UNSET

    @property
    def resource_version(self) -> int:
        """The version of this object (increases with every write)."""
        return self._rv

    @property
    def value(self) -> bytes:
        """The JSON document as bytes."""
        return self._value

    def json(self) -> Any:
        """The decoded JSON document (decoded once, then cached; do not mutate it)."""
        doc = self._doc
        if doc is _UNSET:
            doc = self._doc = json.loads(self._value)
        return doc

    @property
    def key(self) -> ResourceKey:
        """The key; for listed objects it comes from ``metadata`` in the JSON."""
        key = self._key
        if key is None:
            prefix = self._prefix or ResourceKey("", "")
            key = self._key = key_from_doc(prefix, self.json())
        elif isinstance(key, str):
            # Built when asked, not kept: 64 bytes an object in a large informer.
            p = self._prefix or ResourceKey("", "")
            return ResourceKey(p.group, p.resource, p.namespace, key)
        return key

    @property
    def labels(self) -> Mapping[str, str]:
        """``metadata.labels`` of the document."""
        return labels_of(self.json())

    def __repr__(self) -> str:
        return f"StoredObject(key={self.key!s}, resource_version={self.resource_version})"

    def _repr_html_(self) -> str:
        return object_html(self)  # a notebook shows its row and its JSON

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredObject):
            return NotImplemented
        return (
            self.resource_version == other.resource_version
            and self.value == other.value
            and self.key == other.key
        )

    def __hash__(self) -> int:
        return hash((self.resource_version, self.value))


class _Unset:
    __slots__ = ()


_UNSET: Any = _Unset()
