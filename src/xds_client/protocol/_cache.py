"""Cached resources per type, and the per-resource status shown by CSDS."""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from functools import lru_cache
from typing import Any, Generic, Literal, TypeVar

from google.protobuf.message import Message

from xds_client._prebuilt_dataclasses import dataclass

from ._mutable_twins import mutable_twin

__all__ = [
    "CachedResource",
    "ResourceState",
    "ResourceStatus",
    "TypeCache",
    "new_cached_resource",
    "any_prefix",
    "new_lazy_cached_resource",
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
    """Serialized bytes of the message. Kept as received in lean mode
    (``lazy_decode``), for delta, and for a SotW resource that came in a ``Resource``
    wrapper or was restored from disk. A bare SotW resource in decoded mode is cached
    without its bytes (a keyed 64-bit hash of them spots an unchanged resend): its
    ``raw`` is the message serialized again on access (deterministically, map keys
    sorted), equal in content to what was received, not always byte for byte."""
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

    def __init__(  # noqa: PLR0917 - the dataclass's own signature
        self,
        type_url: str,
        name: str,
        version: str,
        status: ResourceStatus,
        last_updated: float,
        error: str | None = None,
        failed_version: str | None = None,
        failed_at: float | None = None,
        control_plane: str = "",
    ) -> None:
        # Written out (one per resource of a CSDS dump): as fast as the dataclass's own.
        _setattr(self, "type_url", type_url)
        _setattr(self, "name", name)
        _setattr(self, "version", version)
        _setattr(self, "status", status)
        _setattr(self, "last_updated", last_updated)
        _setattr(self, "error", error)
        _setattr(self, "failed_version", failed_version)
        _setattr(self, "failed_at", failed_at)
        _setattr(self, "control_plane", control_plane)


_setattr = object.__setattr__  # what a frozen dataclass's __init__ sets fields with


def varint(n: int) -> bytes:
    """``n`` as a protobuf varint."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@lru_cache(maxsize=256)
def any_prefix(type_url: str) -> bytes:
    """How the plain encoding of an ``Any`` of ``type_url`` starts, up to the value's length."""
    url = type_url.encode()
    return b"\n" + varint(len(url)) + url + b"\x12"


_new = object.__new__
(
    _set_name, _set_version, _set_resource, _set_raw, _set_ttl, _set_deadline, _set_updated,
    _set_aliases, _set_rversion,
) = (getattr(CachedResource, name).__set__ for name in CachedResource.__match_args__)  # fmt: skip


_CachedDraft = mutable_twin(CachedResource)
"""``CachedResource``'s mutable twin (see :mod:`._mutable_twins`)."""


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
    if _CachedDraft is not None:  # its mutable twin, then the class (half the setters' cost)
        draft = _CachedDraft()
        draft.name = name
        draft.version = version
        draft.resource = resource
        draft.raw = raw
        draft.ttl = ttl
        draft.ttl_deadline = ttl_deadline
        draft.last_updated = last_updated
        draft.aliases = aliases
        draft.resource_version = resource_version
        draft.__class__ = CachedResource  # frozen from here on
        built: CachedResource[Any] = draft
        return built
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


class _PlainCachedResource(CachedResource[M]):
    """A bare SotW resource cached without its bytes: ``raw`` is serialized on access."""

    __slots__ = ()

    @property
    def raw(self) -> bytes:
        """The message serialized again (deterministically): see :attr:`CachedResource.raw`."""
        resource: Message = self.resource
        return resource.SerializeToString(deterministic=True)


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


@dataclass(frozen=True, slots=True)
class Record:
    """What every bare resource stored by one response shares: one object per response,
    not one per resource (the cache keeps no Python object per bare entry)."""

    version: str
    last_updated: float


def _plain_entry(
    name: str, value: Any, record: Record, decode: Callable[[bytes], Message] | None
) -> CachedResource[Any]:
    """The :class:`CachedResource` of a bare entry (built on access)."""
    if type(value) is bytes:  # lean mode: the bytes, decoded on access
        assert decode is not None
        return new_lazy_cached_resource(
            name, record.version, decode, value, None, None, record.last_updated, (), ""
        )
    entry: CachedResource[Any] = _new(_PlainCachedResource)
    _set_name(entry, name)
    _set_version(entry, record.version)
    _set_resource(entry, value)
    _set_ttl(entry, None)
    _set_deadline(entry, None)
    _set_updated(entry, record.last_updated)
    _set_aliases(entry, ())
    _set_rversion(entry, "")
    return entry


class TypeCache:
    """Resources of one type by name, with an index from content hashes and aliases.

    Two kinds of entry share one dict, ``values``, in insertion order:

    - a *bare* entry (a SotW resource with no TTL, aliases or per-resource version, the
      common case) is the decoded message itself, or its bytes in lean mode, plus the
      response-wide :class:`Record` of its version and time: no object per entry;
    - any other entry (delta, a ``Resource`` wrapper, a TTL, restored from disk) is a
      :class:`CachedResource` with its bytes.

    :meth:`get` and :attr:`entries` build a :class:`CachedResource` of a bare entry on
    access. A SotW cache also indexes each entry by the *key* of its content: the hash
    of the plain serialized ``Any`` that carries it (``_any_prefix``, the length, the
    value), so a resource sent again with the same bytes is named without parsing it.
    Only that 64-bit keyed hash is kept, not a second copy of the bytes.
    """

    __slots__ = (
        "_by_alias", "_by_key", "_key_of", "_last", "_prefix", "_records", "decode", "renewable",
        "values",
    )  # fmt: skip

    def __init__(
        self, decode: Callable[[bytes], Message] | None = None, prefix: bytes = b""
    ) -> None:
        self.values: dict[str, Any] = {}
        """name -> decoded message or bytes (bare entries), or CachedResource."""
        self._records: dict[str, Record] = {}
        self._key_of: dict[str, int] = {}
        self._by_key: dict[int, str] = {}
        self._by_alias: dict[str, str] = {}
        self._last: Record | None = None
        self._prefix = prefix
        self.decode = decode
        """Decodes the bytes of a lean bare entry (the type's ``ResourceType.decode``)."""
        # How many entries have a TTL or a per-resource version (a same-bytes resend renews them).
        self.renewable = 0

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def key_for(self, value: bytes) -> int:
        """The content key of a resource of serialized bytes ``value``: the hash of the
        plain ``Any`` of the type carrying it (what a raw response hashes as it reads)."""
        return hash(self._prefix + varint(len(value)) + value)

    def holds(self, name_or_alias: str) -> object | None:
        """What is cached as ``name_or_alias`` (by name or alias), or None: no object built."""
        value = self.values.get(name_or_alias)
        if value is None:
            real = self._by_alias.get(name_or_alias)
            if real is not None:
                value = self.values.get(real)
        return value

    def aliases_of(self, name: str) -> tuple[str, ...]:
        """The aliases of the entry cached as ``name`` (``()`` when none or not cached)."""
        value = self.values.get(name)
        return value.aliases if isinstance(value, CachedResource) else ()

    def record(self, version: str, now: float) -> Record:
        """The record for bare entries stored at ``now`` with ``version`` (shared)."""
        last = self._last
        if last is None or last.version != version or last.last_updated != now:
            last = self._last = Record(version, now)
        return last

    def get(self, name: str) -> CachedResource[Any] | None:
        """The cached resource called ``name``, or None."""
        value = self.values.get(name)
        if value is None or isinstance(value, CachedResource):
            return value
        return _plain_entry(name, value, self._records[name], self.decode)

    def is_bare(self, name: str) -> bool:
        """Whether ``name`` is a bare entry (no TTL, aliases, per-resource version)."""
        return name in self._records

    def version_of(self, name: str) -> str:
        """The cached version of ``name`` (it must be cached)."""
        record = self._records.get(name)
        if record is not None:
            return record.version
        entry: CachedResource[Any] = self.values[name]
        return entry.version

    def key_of(self, name: str) -> int | None:
        """The content key ``name`` is indexed by, or None."""
        return self._key_of.get(name)

    def keys_index(self) -> Mapping[int, str]:
        """The live content key -> name index (callers must not mutate it).

        A hit is trusted on the hash: a false one is a 64-bit keyed-hash collision
        (docs/protocol.md, "Unchanged resources")."""
        return self._by_key

    @property
    def entries(self) -> Mapping[str, CachedResource[Any]]:
        """Name -> :class:`CachedResource` (bare entries built on access; live, read-only)."""
        if not self._records:
            return self.values  # every entry is a CachedResource already (delta)
        return _Entries(self)

    def resolve(self, name_or_alias: str) -> CachedResource[Any] | None:
        """The resource called ``name_or_alias`` or having it as an alias."""
        entry = self.get(name_or_alias)
        if entry is None:
            real = self._by_alias.get(name_or_alias)
            if real is not None:
                entry = self.get(real)
        return entry

    def put(self, entry: CachedResource[Any], key: int | None = None) -> None:
        """Insert or replace ``entry`` (kept whole), indexed by ``key`` when given."""
        name = entry.name
        if name in self.values:
            self._unindex(name, keep_key=key is not None and self._key_of.get(name) == key)
        if entry.ttl is not None or entry.resource_version:
            self.renewable += 1
        self.values[name] = entry
        if key is not None:
            self._key_of[name] = key
            self._by_key[key] = name
        for alias in entry.aliases:
            self._by_alias[alias] = name

    def put_bare(
        self, names: Sequence[str], values: Sequence[Any], keys: Sequence[int], record: Record
    ) -> None:
        """Insert or replace bare entries ``names`` (messages, or bytes in lean mode)
        indexed by content ``keys``: one call per response, not per entry."""
        stored = self.values
        if stored:
            for name in [n for n in names if n in stored]:
                self._unindex(name, keep_key=False)
        stored.update(zip(names, values, strict=True))
        self._records.update(zip(names, [record] * len(names), strict=True))
        self._key_of.update(zip(names, keys, strict=True))
        self._by_key.update(zip(keys, names, strict=True))

    def put_bare_dict(
        self, values: dict[str, Any], keys: Mapping[str, int], record: Record
    ) -> None:
        """:meth:`put_bare` of the names of ``values`` (each one's message, or bytes in
        lean mode) and ``keys`` (each one's content key, in the same order): dicts are
        merged as dicts, with no pair built per entry (a copy when the cache is empty)."""
        stored = self.values
        if stored:
            for name in [n for n in values if n in stored]:
                self._unindex(name, keep_key=False)
        stored.update(values)
        self._records.update(dict.fromkeys(values, record))
        self._key_of.update(keys)
        self._by_key.update(zip(keys.values(), keys, strict=True))

    def pop(self, name: str) -> CachedResource[Any] | None:
        """Remove and return the resource called ``name``."""
        entry = self.get(name)
        if entry is not None:
            self.discard(name)
        return entry

    def discard(self, name: str) -> None:
        """Remove the resource called ``name``, if cached (no object built)."""
        if name in self.values:
            self._unindex(name, keep_key=False)
            del self.values[name]

    def view(self) -> Mapping[str, CachedResource[Any]]:
        """The live name -> resource mapping (callers must not mutate it)."""
        return self.entries

    def _unindex(self, name: str, *, keep_key: bool) -> None:
        """Forget the indexes of the entry cached as ``name`` (about to be replaced)."""
        if self._records.pop(name, None) is None:
            entry: CachedResource[Any] = self.values[name]
            if entry.ttl is not None or entry.resource_version:
                self.renewable -= 1
            for alias in entry.aliases:
                if self._by_alias.get(alias) == name:
                    del self._by_alias[alias]
        if not keep_key:
            key = self._key_of.pop(name, None)
            if key is not None and self._by_key.get(key) == name:
                del self._by_key[key]


class _Entries(Mapping[str, CachedResource[Any]]):
    """:attr:`TypeCache.entries` when bare entries exist: each built on access."""

    __slots__ = ("_cache",)

    def __init__(self, cache: TypeCache) -> None:
        self._cache = cache

    def __getitem__(self, name: str) -> CachedResource[Any]:
        entry = self._cache.get(name)
        if entry is None:
            raise KeyError(name)
        return entry

    def get(self, name: str, default: Any = None) -> Any:
        entry = self._cache.get(name)
        return default if entry is None else entry

    def __contains__(self, name: object) -> bool:
        return name in self._cache.values

    def __iter__(self) -> Iterator[str]:
        return iter(self._cache.values)

    def __len__(self) -> int:
        return len(self._cache.values)

    def keys(self) -> KeysView[str]:
        return self._cache.values.keys()

    def items(self) -> ItemsView[str, CachedResource[Any]]:
        return ItemsView(self)

    def values(self) -> ValuesView[CachedResource[Any]]:
        return ValuesView(self)
