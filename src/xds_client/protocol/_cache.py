"""Cached resources per type, and the per-resource status shown by CSDS."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Generic, Literal, TypeVar

from google.protobuf.message import Message

__all__ = [
    "CachedResource",
    "ResourceState",
    "ResourceStatus",
    "TypeCache",
    "new_cached_resource",
    "new_lazy_cached_resource",
    "new_plain_entries",
    "with_changes",
]

M = TypeVar("M", bound=Message)

ResourceStatus = Literal[
    "REQUESTED", "ACKED", "NACKED", "DOES_NOT_EXIST", "RECEIVED_ERROR", "TIMEOUT"
]


@dataclass(frozen=True, slots=True)
class CachedResource(Generic[M]):
    """The last accepted value of one resource."""

    name: str
    """Name of the resource."""
    version: str
    """SotW: ``version_info`` of the response that last changed it; delta: its own version."""
    resource: M
    """The decoded message."""
    raw: bytes
    """Serialized bytes of the message as received (compared to skip unchanged updates)."""
    ttl: float | None
    """TTL in seconds the server gave, or None."""
    ttl_deadline: float | None
    """When the resource expires unless refreshed (the caller's clock), or None."""
    last_updated: float
    """When the value last changed (the caller's clock)."""
    aliases: tuple[str, ...] = ()
    """Alternative names (VHDS)."""
    resource_version: str = ""
    """The per-resource version the server sent (``Resource.version``); heartbeats must match it."""


@dataclass(frozen=True, slots=True)
class ResourceState:
    """Where one resource stands, in the terms of CSDS ``ClientResourceStatus``."""

    type_url: str
    """Type URL of the resource."""
    name: str
    """Name of the resource (or the subscribed alias)."""
    version: str
    """Version of the cached value, ``""`` when nothing is cached."""
    status: ResourceStatus
    """``REQUESTED`` (waiting), ``ACKED`` (cached, last update accepted), ``NACKED`` (last
    update for it rejected; any cached value is still in use), ``DOES_NOT_EXIST``,
    ``RECEIVED_ERROR`` (the server reported an error for it, TP3; any cached value
    is still in use), ``TIMEOUT`` (not received in time, with the A88
    ``resource_timer_is_transient_error`` feature)."""
    last_updated: float
    """When the value or the status last changed (caller's clock); 0.0 when never."""
    error: str | None = None
    """Why the last update was rejected (NACKED), or the server's error (RECEIVED_ERROR)."""
    failed_version: str | None = None
    """Version of the rejected update (NACKED only)."""
    failed_at: float | None = None
    """When the update was rejected (NACKED only)."""
    control_plane: str = ""
    """``control_plane.identifier`` of the last response of its type the client accepted
    (which server instance it speaks to); ``""`` when the server sends none."""


def varint(n: int) -> bytes:
    """``n`` as a protobuf varint."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_new = object.__new__
(
    _set_name, _set_version, _set_resource, _set_raw, _set_ttl, _set_deadline, _set_updated,
    _set_aliases, _set_rversion,
) = (getattr(CachedResource, f.name).__set__ for f in fields(CachedResource))  # fmt: skip


def new_cached_resource(  # noqa: PLR0917 - positional like the dataclass it builds
    name: str,
    version: str,
    resource: Message,
    raw: bytes,
    ttl: float | None,
    ttl_deadline: float | None,
    last_updated: float,
    aliases: tuple[str, ...],
    resource_version: str,
) -> CachedResource[Any]:
    """``CachedResource(...)`` for the hot path of a large response.

    A frozen dataclass sets each field through ``object.__setattr__``; the slot
    setters do the same at about half the cost, which shows at 10,000 resources.
    """
    entry: CachedResource[Any] = _new(CachedResource)
    _set_name(entry, name)
    _set_version(entry, version)
    _set_resource(entry, resource)
    _set_raw(entry, raw)
    _set_ttl(entry, ttl)
    _set_deadline(entry, ttl_deadline)
    _set_updated(entry, last_updated)
    _set_aliases(entry, aliases)
    _set_rversion(entry, resource_version)
    return entry


def new_plain_entries(
    names: Sequence[str], version: str, messages: Sequence[Message], raws: Sequence[bytes],
    last_updated: float,
) -> list[CachedResource[Any]]:  # fmt: skip
    """:func:`new_cached_resource` for many resources with no TTL, aliases or
    per-resource version (bare SotW resources): one call per response, not per entry."""
    out: list[CachedResource[Any]] = []
    append = out.append
    new = _new
    for name, message, raw in zip(names, messages, raws, strict=True):
        entry: CachedResource[Any] = new(CachedResource)
        _set_name(entry, name)
        _set_version(entry, version)
        _set_resource(entry, message)
        _set_raw(entry, raw)
        _set_ttl(entry, None)
        _set_deadline(entry, None)
        _set_updated(entry, last_updated)
        _set_aliases(entry, ())
        _set_rversion(entry, "")
        append(entry)
    return out


class _LazyCachedResource(CachedResource[M]):
    """A cached resource that keeps only its bytes and decodes them on each access.

    Built by :func:`new_lazy_cached_resource` when ``ProtocolConfig.lazy_decode`` is set:
    a decoded Cluster costs several times its serialized size in memory.
    """

    __slots__ = ("_decode",)
    _decode: Callable[[bytes], M]

    @property
    def resource(self) -> M:
        """The message, decoded from ``raw`` on every access (keep it if you reuse it)."""
        return self._decode(self.raw)


_set_decode = _LazyCachedResource._decode.__set__  # type: ignore[misc,attr-defined]


def new_lazy_cached_resource(  # noqa: PLR0917 - positional like new_cached_resource
    name: str,
    version: str,
    decode: Callable[[bytes], Message],
    raw: bytes,
    ttl: float | None,
    ttl_deadline: float | None,
    last_updated: float,
    aliases: tuple[str, ...],
    resource_version: str,
) -> CachedResource[Any]:
    """A :class:`CachedResource` whose ``resource`` is ``decode(raw)``, computed on access."""
    entry: _LazyCachedResource[Any] = _new(_LazyCachedResource)
    _set_name(entry, name)
    _set_version(entry, version)
    _set_decode(entry, decode)
    _set_raw(entry, raw)
    _set_ttl(entry, ttl)
    _set_deadline(entry, ttl_deadline)
    _set_updated(entry, last_updated)
    _set_aliases(entry, aliases)
    _set_rversion(entry, resource_version)
    return entry


def with_changes(
    entry: CachedResource[Any],
    *,
    version: str,
    ttl: float | None,
    ttl_deadline: float | None,
    resource_version: str,
) -> CachedResource[Any]:
    """A copy of ``entry`` with new versions and TTL, lazy or not like ``entry``."""
    if isinstance(entry, _LazyCachedResource):
        return new_lazy_cached_resource(
            entry.name, version, entry._decode, entry.raw, ttl, ttl_deadline,
            entry.last_updated, entry.aliases, resource_version,
        )  # fmt: skip
    return new_cached_resource(
        entry.name, version, entry.resource, entry.raw, ttl, ttl_deadline,
        entry.last_updated, entry.aliases, resource_version,
    )  # fmt: skip


class TypeCache:
    """Resources of one type by name, with a reverse index from bytes and aliases.

    The bytes index lets a SotW response skip decoding a bare resource whose
    bytes equal a cached one: its name is then known without parsing it.
    """

    __slots__ = (
        "_by_alias", "_by_packed", "_by_raw", "_prefix", "entries", "renamed", "renewable",
    )  # fmt: skip

    def __init__(self) -> None:
        self.entries: dict[str, CachedResource[Any]] = {}
        self._by_raw: dict[bytes, str] = {}
        self._by_alias: dict[str, str] = {}
        # The hash of the plain serialized ``Any`` (``_prefix``, the length, ``raw``) a
        # raw SotW response carried a resource in. Only the hash is kept (the bytes would
        # be a second copy of every resource); it is computed again to unindex one.
        self._by_packed: dict[int, str] = {}
        self._prefix = b""
        # How many entries have a TTL or a per-resource version (a same-bytes resend renews them).
        self.renewable = 0
        # Names whose bytes came in a wrapper named otherwise than the body: the same
        # bytes sent bare name another resource, so name_of_raw() must not be trusted.
        self.renamed: set[str] = set()

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def get(self, name: str) -> CachedResource[Any] | None:
        """The cached resource called ``name``, or None."""
        return self.entries.get(name)

    def name_of_raw(self, raw: bytes) -> str | None:
        """Name of the cached resource whose bytes are exactly ``raw``."""
        return self._by_raw.get(raw)

    def name_of_packed(self, packed: bytes) -> str | None:
        """Name of the cached resource that arrived as these serialized ``Any`` bytes."""
        name = self._by_packed.get(hash(packed))
        if name is not None:
            entry = self.entries.get(name)
            if entry is not None and packed.endswith(entry.raw):
                return name
        return None

    def packed_names(self) -> Mapping[int, str]:
        """The live ``hash(serialized Any)`` -> name index (callers must not mutate it).

        A hit is trusted on the hash (a false one is a 64-bit keyed-hash collision);
        :meth:`name_of_packed` also compares the bytes.
        """
        return self._by_packed

    def index_packed(self, packed: Mapping[str, int], prefix: bytes) -> None:
        """Remember that each cached ``name`` arrived as an ``Any`` hashing to ``packed[name]``.

        An entry keeps it until its bytes change or it leaves the cache. The caller
        hashes each ``Any`` as it reads it, so its bytes are freed at once (held to the
        end of a large response, they would leave the heap full of holes).
        """
        self._prefix = prefix
        self._by_packed.update(zip(packed.values(), packed.keys(), strict=True))

    def resolve(self, name_or_alias: str) -> CachedResource[Any] | None:
        """The resource called ``name_or_alias`` or having it as an alias."""
        entry = self.entries.get(name_or_alias)
        if entry is None:
            real = self._by_alias.get(name_or_alias)
            if real is not None:
                entry = self.entries.get(real)
        return entry

    def put(self, entry: CachedResource[Any]) -> None:
        """Insert or replace ``entry``, keeping the indexes right."""
        old = self.entries.get(entry.name)
        if old is not None:
            self._unindex(old)
            if self._by_packed and old.raw != entry.raw:
                self._unindex_packed(old.name, old.raw)
        if entry.ttl is not None or entry.resource_version:
            self.renewable += 1
        self.entries[entry.name] = entry
        self._by_raw[entry.raw] = entry.name
        for alias in entry.aliases:
            self._by_alias[alias] = entry.name

    def add_new(
        self, names: Sequence[str], entries: Sequence[CachedResource[Any]], raws: Sequence[bytes]
    ) -> None:
        """Insert ``entries`` (called ``names``, of bytes ``raws``), none of them cached
        yet, with no TTL, per-resource version or aliases (:func:`new_plain_entries`)."""
        self.entries.update(zip(names, entries, strict=True))
        self._by_raw.update(zip(raws, names, strict=True))

    def pop(self, name: str) -> CachedResource[Any] | None:
        """Remove and return the resource called ``name``."""
        old = self.entries.pop(name, None)
        if old is not None:
            self._unindex(old)
            if self._by_packed:
                self._unindex_packed(name, old.raw)
        return old

    def view(self) -> Mapping[str, CachedResource[Any]]:
        """The live name -> resource mapping (callers must not mutate it)."""
        return self.entries

    def _unindex_packed(self, name: str, raw: bytes) -> None:
        key = hash(self._prefix + varint(len(raw)) + raw)
        if self._by_packed.get(key) == name:
            del self._by_packed[key]

    def _unindex(self, entry: CachedResource[Any]) -> None:
        if entry.ttl is not None or entry.resource_version:
            self.renewable -= 1
        if self.renamed:
            self.renamed.discard(entry.name)
        if self._by_raw.get(entry.raw) == entry.name:
            del self._by_raw[entry.raw]
        for alias in entry.aliases:
            if self._by_alias.get(alias) == entry.name:
                del self._by_alias[alias]
