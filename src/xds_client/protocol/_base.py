"""What SotW and delta share: subscriptions, cache, timers, status and ACK queue.

Subclasses frame requests and apply responses; everything that decides *what*
is wanted, held, expired or missing lives here once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from google.rpc.status_pb2 import Status

from xds_client._prebuilt_dataclasses import dataclass
from xds_client.errors import ProtocolUsageError, ResourceError, UnknownResourceTypeError
from xds_client.federation import is_glob_collection
from xds_client.resources import ResourceType, resource_type

from ._cache import (
    CachedResource,
    ResourceState,
    TypeCache,
    any_prefix,
    new_cached_resource,
    new_lazy_cached_resource,
    with_changes,
)
from ._config import ProtocolConfig
from ._events import (
    Event,
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceErrorReported,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
    new_lazy_resource_updated,
    new_resource_updated,
    new_response_accepted,
)
from ._state import CSDS_SHOWN, DNE_TIMER, Detail, I, ResourceStates
from ._state import S as St
from ._subscriptions import Subscription, split_wildcard
from ._timers import DeadlineQueue
from ._validation import RESPONSE_KEY, nack_message

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["ProtocolCore", "TypeState"]

_DEADLINE_EXCEEDED = 4
_NOT_FOUND = 5
_CODE_NAMES = (
    *("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND"),
    *("ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION"),
    *("ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"),
    "UNAUTHENTICATED",
)
"""``google.rpc.Code`` names by number, for messages."""
_TTL = "ttl"
_CLEARED = frozenset({St.CACHED_NACKED, St.CACHED_ERROR})
"""Statuses a valid resend of the kept bytes ends, with an event (see ``_refresh``)."""
_EMPTY: Mapping[str, CachedResource[Any]] = MappingProxyType({})


S = TypeVar("S")  # per-type, per-stream state of a subclass


@dataclass(frozen=True, slots=True)
class _Reply:
    """An ACK or NACK owed to the server for one response."""

    type_url: str
    nonce: str
    version: str
    """SotW: ``version_info`` to send (the new one for an ACK, the last good for a NACK)."""
    error: Status | None


class TypeState:
    """Everything known about one type URL; lives across streams."""

    __slots__ = (
        "cache",
        "control_plane",
        "foreign_versions",
        "initial_sent",
        "last_error",
        "nonce",
        "requested",
        "rtype",
        "states",
        "subs",
        "type_url",
        "version",
    )

    def __init__(
        self,
        type_url: str,
        rtype: ResourceType[Any] | None,
        timers: DeadlineQueue[tuple[str, str, str]],
        timeout: float | None,
    ) -> None:
        self.type_url = type_url
        self.rtype = rtype
        self.subs = Subscription()
        self.cache = TypeCache(
            None if rtype is None else rtype.decode, any_prefix(type_url)
        )  # fmt: skip
        self.states = ResourceStates(type_url, self.cache.holds, timers, timeout)
        """The status of each resource (the one table, ``_state.py``)."""
        self.version = ""
        """Version of the last accepted response (SotW ``version_info``)."""
        self.control_plane = ""
        """``control_plane.identifier`` of the last accepted response (CSDS shows it)."""
        self.foreign_versions = False
        """The cached versions were learnt from another server: not sent to this one."""
        self.last_error: Status | None = None
        """``error_detail`` of the last NACK, until a response is accepted."""
        # Per stream:
        self.nonce = ""
        self.initial_sent = False
        self.requested: set[str] = set()
        """Names a request sent on this stream has subscribed (each gets one REQUEST_SENT)."""

    def wanted(self, name: str) -> bool:
        """Whether the cached resource called ``name`` is still wanted."""
        return self.subs.wants(name, self.cache.aliases_of(name))


def control_plane_id(response: Any) -> str:
    """``control_plane.identifier`` of a parsed response (the SotW core decodes a raw
    response's own, which it keeps serialized, in ``_sotw._decoded_parts``)."""
    identifier: str = response.control_plane.identifier
    return identifier


class ProtocolCore(Generic[S]):
    """Base of :class:`SotwProtocol` and :class:`DeltaProtocol` (not public).

    ``S`` is what a subclass remembers per type about the current stream (what it
    told the server); :meth:`_new_stream` makes a fresh one for each new stream.
    """

    _sotw_only = False

    def __init__(self, config: ProtocolConfig) -> None:
        if not isinstance(config, ProtocolConfig):
            raise ProtocolUsageError(f"expected a ProtocolConfig, got {type(config).__name__}")
        self.config = config
        self._types: dict[str, TypeState] = {}
        self._timers: DeadlineQueue[tuple[str, str, str]] = DeadlineQueue()
        self._connected = False
        self._streams = 0
        self._node_sent = False
        self._replies: list[_Reply] = []
        self._streams_state: dict[str, S] = {}
        self._restored: set[str] = set()
        """Types seeded by :meth:`restore`: a first stream already has state to resume."""

    # ----------------------------------------------------------------- subscriptions

    def _state(self, type_url: str) -> TypeState:
        st = self._types.get(type_url)
        if st is not None:
            return st
        if not isinstance(type_url, str) or "/" not in type_url:
            raise ProtocolUsageError(
                f"expected a type URL such as 'type.googleapis.com/envoy.config.cluster.v3."
                f"Cluster', got {type_url!r}; resources.type_url_of() converts aliases"
            )
        try:
            rtype: ResourceType[Any] | None = resource_type(type_url)
        except UnknownResourceTypeError:
            rtype = None  # responses of it are NACKed with a clear reason
        if rtype is not None and self._sotw_only and not rtype.sotw:
            raise ProtocolUsageError(
                f"{type_url} exists only in the delta protocol; use DeltaProtocol"
            )
        st = TypeState(type_url, rtype, self._timers, self.config.does_not_exist_timeout)
        self._types[type_url] = st
        return st

    def subscribe(self, type_url: str, names: Iterable[str] | None) -> None:
        """Want ``names`` of ``type_url`` in addition to what is already wanted.

        None (or ``"*"`` among the names) subscribes to the wildcard: every
        resource of the type. The request goes out on the next
        :meth:`requests_to_send`.
        """
        explicit, wildcard = split_wildcard(names, "subscribe")
        st = self._state(type_url)
        added, wildcard_added = st.subs.add(explicit, wildcard)
        stored = st.states.status
        for name in added:
            if name in stored:  # held through the wildcard until now (other rows: no-ops)
                st.states.fire(name, I.SUBSCRIBED, 0.0)
        if added or wildcard_added:
            self._on_subscribed(st, added, wildcard_added)

    def unsubscribe(self, type_url: str, names: Iterable[str] | None) -> None:
        """Stop wanting ``names``; None (or ``"*"``) drops the wildcard only.

        Cached resources no longer wanted are forgotten without an event (the
        caller asked for it). Names still covered by the wildcard stay cached.
        """
        explicit, wildcard = split_wildcard(names, "unsubscribe")
        st = self._types.get(type_url)
        if st is None:
            return
        removed, wildcard_removed = st.subs.remove(explicit, wildcard)
        if not (removed or wildcard_removed):
            return
        states = st.states
        stored = states.status
        for name in removed:
            st.requested.discard(name)  # a later subscription is a new one
            if name in stored:  # for the implicit statuses both inputs are no-ops
                wanted = st.wanted(name) if name in st.cache else st.subs.wants(name)
                states.fire(name, I.UNNAMED if wanted else I.UNWANTED, 0.0)
        if wildcard_removed:
            candidates: Iterable[str] = list(st.cache)
        else:
            candidates = [e.name for n in removed if (e := st.cache.resolve(n)) is not None]
            # (by name or alias; the wildcard case above takes every name, no object built)
        for name in candidates:
            if not st.wanted(name):
                if name in stored:
                    states.fire(name, I.UNWANTED, 0.0)
                self._forget(st, name)
        if wildcard_removed:  # what only the wildcard held, the server's errors included
            for name in [n for n in stored if n not in st.cache and not st.subs.wants(n)]:
                states.fire(name, I.UNWANTED, 0.0)
        if not st.subs.active:
            states.clear(0.0)
        self._on_unsubscribed(st, removed, wildcard_removed)

    def all_cached(self) -> bool:
        """Whether every subscribed name has a cached value, and every wildcard
        subscription something cached: with all of it, gRFC A71 does not fall back."""
        for st in self._types.values():
            subs = st.subs
            if not subs.active:
                continue
            if subs.wildcard and not st.cache:
                return False
            holds = st.cache.holds
            if any(holds(name) is None for name in subs.names):
                return False
        return True

    def subscribed_types(self) -> list[str]:
        """Type URLs with anything subscribed, in the order first subscribed."""
        return [url for url, st in self._types.items() if st.subs.active]

    def _on_subscribed(self, st: TypeState, added: list[str], wildcard: bool) -> None:
        """Subclass hook: frame the change for the wire."""

    def _on_unsubscribed(self, st: TypeState, removed: list[str], wildcard: bool) -> None:
        """Subclass hook: frame the change for the wire."""

    # ----------------------------------------------------------------- stream

    @property
    def is_connected(self) -> bool:
        """Whether a stream is up (between :meth:`connected` and :meth:`disconnected`)."""
        return self._connected

    def connected(self, now: float) -> None:
        """A new stream is up: every subscribed type is requested again on it."""
        if self._connected:
            raise ProtocolUsageError("connected() called twice; call disconnected() first")
        self._connected = True
        self._streams += 1
        self._node_sent = False
        self._replies.clear()
        for st in self._types.values():
            st.nonce = ""
            st.initial_sent = False
            st.requested.clear()
            self._reset_stream(st)

    def server_changed(self) -> None:
        """The next stream goes to another server (fallback, or back to the primary).

        What this one told us is not sent there, as in Envoy (envoy#35692, #43876):
        SotW sends no ``version_info`` and delta no ``initial_resource_versions``
        until that server's first accepted response of the type. Cached resources
        stay (gRFC A71). Call it between :meth:`disconnected` and :meth:`connected`.
        """
        if self._connected:
            raise ProtocolUsageError("server_changed() needs the stream disconnected() first")
        for st in self._types.values():
            st.version = ""
            st.nonce = ""
            st.foreign_versions = True
            st.states.fire_stored(I.SERVER_CHANGED, 0.0)

    def disconnected(self, now: float) -> None:
        """The stream ended. Owed ACKs are dropped; does-not-exist timers stop.

        Cached resources stay (and TTLs keep running): the last good
        configuration is kept until the server says otherwise. Calling it
        while not connected does nothing.
        """
        if not self._connected:
            return
        self._connected = False
        self._replies.clear()
        for kind, type_url, name in self._timers.armed_keys():
            if kind == DNE_TIMER:
                self._types[type_url].states.fire(name, I.STREAM_FAILED, now)

    def _new_stream(self) -> S:
        """Subclass hook: the per-type state of a stream that has told the server nothing."""
        raise NotImplementedError

    def _stream(self, st: TypeState) -> S:
        ss = self._streams_state.get(st.type_url)
        if ss is None:
            ss = self._streams_state[st.type_url] = self._new_stream()
        return ss

    def _reset_stream(self, st: TypeState) -> None:
        """Forget what the old stream told the server about this type."""
        self._streams_state[st.type_url] = self._new_stream()

    def _require_connected(self, what: str) -> None:
        if not self._connected:
            raise ProtocolUsageError(f"{what}() needs a stream: call connected() first")

    def _with_node(self, request: Any) -> None:
        if not self._node_sent or self.config.node_in_every_request:
            request.node.CopyFrom(self.config.node)
            self._node_sent = True

    # ----------------------------------------------------------------- timers

    def _start_dne_timers(self, st: TypeState, names: Iterable[str], now: float) -> None:
        timeout = self.config.does_not_exist_timeout
        if timeout is None or not self._connected:
            return
        subs = st.subs.names
        requested = st.requested
        fire = st.states.fire
        for name in names:
            # Only the first request subscribing a name on this stream starts its
            # timer: a SotW ACK repeating the name (say after a TTL expiry) does not.
            if name in requested or name not in subs or is_glob_collection(name):
                continue  # a glob collection (TP1) may be empty: it never "does not exist"
            requested.add(name)
            fire(name, I.REQUEST_SENT, now)  # the table decides who gets a timer

    def tick(self, now: float) -> list[Event]:
        """Fire every timer due at ``now``: TTL expiry and does-not-exist."""
        events: list[Event] = []
        for kind, type_url, name in self._timers.pop_due(now):
            st = self._types[type_url]
            if kind == DNE_TIMER:
                # The queue has disarmed the key already; the table's cancel is a no-op.
                if self.config.resource_timer_is_transient_error:
                    # A88: late, not absent; the next stream's request asks again.
                    timeout = self.config.does_not_exist_timeout
                    text = f"not received within {timeout:g}s"
                    st.states.fire(name, I.TIMER_FIRED_TRANSIENT, now, Detail(text, "", now))
                    events.append(ResourceErrorReported(type_url, name, _DEADLINE_EXCEEDED, text))
                    continue
                st.states.fire(name, I.TIMER_FIRED, now)
                events.append(ResourceDoesNotExist(type_url, name))
            else:
                entry = st.cache.get(name)
                if entry is not None:
                    if st.states.status:
                        st.states.fire(name, I.TTL_EXPIRED, now)
                    self._forget(st, name)
                    events.append(ResourceRemoved(type_url, name, "ttl_expired", entry.aliases))
        return events

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must be called next, or None when no timer runs."""
        return self._timers.next_deadline()

    # ----------------------------------------------------------------- cache

    def _store(  # noqa: PLR0917 - positional: called once per changed resource
        self,
        st: TypeState,
        name: str,
        version: str,
        message: Message | None,
        raw: bytes,
        ttl: float | None,
        aliases: tuple[str, ...],
        resource_version: str,
        metadata: Message | None,
        control_plane: str,
        now: float,
        events: list[Any],
        key: int | None = None,
    ) -> None:
        """Cache a changed resource and tell watchers.

        ``key`` (SotW) is the content key to index it by (:meth:`TypeCache.key_for`); a
        resource with one and no TTL, aliases or per-resource version is cached bare.
        ``message`` is None in lean mode when it was not kept: the event then decodes
        ``raw`` on access.
        """
        if message is None:
            decode = st.cache.decode
            assert decode is not None
            event = new_lazy_resource_updated(
                st.type_url, name, version, decode, raw, aliases, metadata, control_plane
            )
        else:
            event = new_resource_updated(
                st.type_url, name, version, message, aliases, metadata, control_plane
            )
        deadline = None if ttl is None else now + ttl
        rtype = st.rtype
        lean = self.config.lazy_decode
        if key is not None and ttl is None and not aliases and not resource_version:
            if st.states.status:
                self._arrived(st, name, aliases, now)
            st.cache.put_bare(
                (name,), (raw if lean else message,), (key,), st.cache.record(version, now)
            )  # fmt: skip
            if self._timers.armed:
                self._arm_ttl(st, name, None, now)
            events.append(event)
            return
        if rtype is not None and lean:
            # Lean mode: keep the bytes only.
            entry = new_lazy_cached_resource(
                name, version, rtype.decode, raw, ttl, deadline, now, aliases, resource_version
            )
        else:
            assert message is not None  # None only in lean mode
            entry = new_cached_resource(
                name, version, message, raw, ttl, deadline, now, aliases, resource_version
            )
        if st.states.status:  # empty in the steady state: new names then write nothing there
            self._arrived(st, name, aliases, now)
        st.cache.put(entry, key)
        if ttl is not None or self._timers.armed:
            self._arm_ttl(st, name, ttl, now)
        events.append(event)

    def _refresh(
        self,
        st: TypeState,
        entry: CachedResource[Any],
        *,
        ttl: float | None,
        version: str | None,
        resource_version: str | None,
        now: float,
        events: list[Any],
        announced: str,
        control_plane: str,
    ) -> None:
        """Same bytes again, or a heartbeat: no event, but TTL and versions move.

        Except when it clears a NACK or a server-reported error: the kept value is then
        announced again (a ``ResourceUpdated`` at version ``announced``), so a watcher
        told of the error learns that it is over (a control plane rolling back to the
        last good value resends exactly those bytes).
        """
        cleared = False
        if entry.name in st.states.status:  # sent again, valid: no longer NACKED or in error
            old, new = st.states.fire(entry.name, I.SAME_BYTES, now)
            cleared = old in _CLEARED and new == St.ACKED
        deadline = None if ttl is None else now + ttl
        changed = entry.ttl != ttl or entry.ttl_deadline != deadline
        new_version = entry.version if version is None else version
        new_rversion = entry.resource_version if resource_version is None else resource_version
        if changed or new_version != entry.version or new_rversion != entry.resource_version:
            st.cache.put(
                with_changes(
                    entry, ttl=ttl, ttl_deadline=deadline,
                    version=new_version, resource_version=new_rversion,
                ),
                st.cache.key_of(entry.name),
            )  # fmt: skip
        if changed:
            self._arm_ttl(st, entry.name, ttl, now)
        if cleared:
            events.append(
                new_resource_updated(
                    st.type_url, entry.name, announced, entry.resource, entry.aliases, None,
                    control_plane,
                )
            )  # fmt: skip

    def _arm_ttl(self, st: TypeState, name: str, ttl: float | None, now: float) -> None:
        key = (_TTL, st.type_url, name)
        if ttl is None:
            self._timers.cancel(key)
        else:
            self._timers.arm(key, now + ttl)

    def _arrived(self, st: TypeState, name: str, aliases: tuple[str, ...], now: float) -> None:
        """A changed resource is about to be cached: it and the aliases it answers move."""
        stored = st.states.status
        for key in (name, *aliases) if aliases else (name,):
            if key in stored:  # an implicit status goes to ACKED: nothing to write
                st.states.fire(key, I.VALID_UPDATE, now)

    def _delete(self, st: TypeState, name: str, now: float, events: list[Event]) -> None:
        """The server deleted the cached ``name`` (absent from full state, delta removal,
        TP3 ``NOT_FOUND``)."""
        states = st.states
        if self.config.ignore_resource_deletion:
            old, _ = states.fire(name, I.REMOVAL_IGNORED, now)
            if old != St.DELETION_IGNORED:
                events.append(ResourceDeletionIgnored(st.type_url, name))
            return
        aliases = st.cache.aliases_of(name)
        names = st.subs.names
        for key in (name, *aliases):
            # Still wanted by name: CSDS shows it as not existing.
            if key in names:
                states.fire(key, I.REMOVED, now)
            elif key == name:
                states.fire(key, I.REMOVED_UNNAMED, now)
        self._forget(st, name)
        events.append(ResourceRemoved(st.type_url, name, "deleted", aliases))

    def _absent(self, st: TypeState, name: str, now: float, events: list[Event]) -> None:
        """The server says it has no ``name``, which is not cached: by name, it does not exist."""
        if name in st.subs.names:
            old, _ = st.states.fire(name, I.REMOVED, now)
            if old != St.DOES_NOT_EXIST:
                events.append(ResourceDoesNotExist(st.type_url, name))
        elif name in st.states.status:
            st.states.fire(name, I.REMOVED_UNNAMED, now)

    def _forget(self, st: TypeState, name: str) -> None:
        """Drop the cached value (its status was moved first, by the caller's input)."""
        st.cache.discard(name)
        self._timers.cancel((_TTL, st.type_url, name))

    def restore(
        self,
        type_url: str,
        version_info: str,
        resources: Iterable[tuple[str, str, str, bytes]],
        now: float,
    ) -> tuple[list[str], dict[str, str]]:
        """Seed the cache with a last good config persisted earlier; no events, no requests.

        ``resources`` holds ``(name, version, resource_version, serialized message)``.
        Only names the subscription wants and the cache does not hold yet are
        taken. The next stream then resumes from them: SotW sends
        ``version_info``, delta sends ``initial_resource_versions``, and bytes
        the server sends again unchanged produce no event. Returns the names
        restored and, by name, why others could not be decoded.
        """
        st = self._state(type_url)
        rtype = st.rtype
        restored: list[str] = []
        errors: dict[str, str] = {}
        if rtype is None:
            return restored, errors
        for name, version, resource_version, raw in resources:
            if name in st.cache or not st.subs.wants(name):
                continue
            try:
                message = rtype.decode(raw)
            except ResourceError as exc:
                errors[name] = str(exc)
                continue
            if name in st.states.status:
                st.states.fire(name, I.RESTORED, now)
            st.cache.put(
                new_cached_resource(name, version, message, raw, None, None, now, (),
                                    resource_version),
                st.cache.key_for(raw) if self._sotw_only else None,
            )  # fmt: skip
            restored.append(name)
        if restored:
            self._restored.add(type_url)
            if not st.version:
                st.version = version_info
        return restored, errors

    def resources(self, type_url: str) -> Mapping[str, CachedResource[Any]]:
        """Cached resources of ``type_url`` by name: a live read-only view."""
        st = self._types.get(type_url)
        return _EMPTY if st is None else MappingProxyType(st.cache.view())

    def version_info(self, type_url: str) -> str:
        """Version of the last accepted response of ``type_url`` (``""`` if none)."""
        st = self._types.get(type_url)
        return "" if st is None else st.version

    def resource_states(self, type_url: str | None = None) -> list[ResourceState]:
        """Status of every subscribed or cached resource, for CSDS."""
        if type_url is None:
            states = list(self._types.values())
        else:
            one = self._types.get(type_url)
            states = [] if one is None else [one]
        out: list[ResourceState] = []
        for st in states:
            seen: set[str] = set()
            for name in (*st.subs.names, *st.cache, *st.states.status):
                if name in seen:
                    continue
                seen.add(name)
                out.append(self._status(st, name))
        return out

    def replay(self, type_url: str) -> list[Event]:
        """What a newcomer must hear of ``type_url`` to know the state held now: each
        cached value as a :class:`ResourceUpdated`, each rejected name as the
        :class:`ResponseRejected` naming it, each name known absent as a
        :class:`ResourceDoesNotExist`. Changes nothing."""
        cached = self.resources(type_url)
        events: list[Event] = []
        for state in self.resource_states(type_url):
            value = cached.get(state.name)
            if value is not None:
                events.append(
                    ResourceUpdated(type_url, value.name, value.version, value.resource,
                                    value.aliases)
                )  # fmt: skip
            if state.status == "NACKED":
                events.append(
                    ResponseRejected(type_url, "", state.failed_version or "",
                                     {state.name: state.error or ""})
                )  # fmt: skip
            elif state.status == "DOES_NOT_EXIST":
                events.append(ResourceDoesNotExist(type_url, state.name))
        return events

    def _status(self, st: TypeState, name: str) -> ResourceState:
        entry = st.cache.resolve(name)
        version = "" if entry is None else entry.version
        updated = 0.0 if entry is None else entry.last_updated
        shown = CSDS_SHOWN[st.states.code(name)]
        detail = st.states.detail.get(name)
        plane = st.control_plane
        if detail is None:
            return ResourceState(
                st.type_url, name, version, shown, updated, control_plane=plane
            )  # fmt: skip
        if shown == "NACKED":
            return ResourceState(
                st.type_url, name, version, shown, updated,
                detail.reason, detail.version, detail.at, plane,
            )  # fmt: skip
        if shown == "DOES_NOT_EXIST":
            return ResourceState(st.type_url, name, "", shown, detail.at, control_plane=plane)
        return ResourceState(
            st.type_url, name, version, shown, detail.at,
            detail.reason, detail.version, detail.at, plane,
        )  # fmt: skip

    # ----------------------------------------------------------------- TP3 errors

    def _resource_errors(
        self, st: TypeState, errors: Iterable[Any], version: str, now: float, events: list[Event]
    ) -> None:
        """Apply a response's ``resource_errors`` (xRFC TP3) to the names we want."""
        subs = st.subs
        for error in errors:
            name = error.resource_name.name
            if not name or not (subs.wildcard or name in subs.names or subs.wants(name)):
                continue
            # The server answered for the name: the table stops its does-not-exist timer.
            code = error.error_detail.code
            message = error.error_detail.message
            if code == _NOT_FOUND:
                if name in st.cache:
                    self._delete(st, name, now, events)
                else:
                    self._absent(st, name, now, events)
                continue
            label = _CODE_NAMES[code] if 0 <= code < len(_CODE_NAMES) else f"code {code}"
            st.states.fire(
                name, I.ERROR_REPORTED, now,
                Detail(f"{label}: {message}" if message else label, version, now),
            )  # fmt: skip
            events.append(ResourceErrorReported(st.type_url, name, code, message))

    # ----------------------------------------------------------------- replies

    def _finish(
        self,
        st: TypeState,
        *,
        nonce: str,
        version: str,
        errors: Mapping[str, str],
        failed: Iterable[str] = (),
        now: float,
        events: list[Event],
        control_plane: str = "",
        valid: int = 0,
        invalid: int | None = None,
    ) -> None:
        """Queue exactly one ACK or NACK for a processed response.

        ``failed`` names the resources whose update was rejected (CSDS shows
        them as NACKED until a good update arrives). ``valid`` and ``invalid`` count
        the response's resources for gRFC A78; ``invalid`` defaults to one per error
        about a resource.
        """
        if not errors:
            st.version = version
            st.control_plane = control_plane
            st.foreign_versions = False
            st.last_error = None
            self._replies.append(_Reply(st.type_url, nonce, version, None))
            events.append(new_response_accepted(st.type_url, version, nonce, control_plane, valid))
            return
        if invalid is None:
            invalid = len(errors) - (RESPONSE_KEY in errors)

        status = Status(
            code=self.config.nack_code, message=nack_message(st.type_url, version, errors)
        )
        st.last_error = status
        drop = self.config.fail_on_data_errors
        fire = st.states.fire
        for name in failed:
            # A57 (and gRPC C-core): the server did send the name, so it exists;
            # the table cancels its does-not-exist timer like a valid arrival does.
            detail = Detail(errors[name], version, now)
            if drop and name in st.cache:
                # A88: the server sent bad data for it; the old value is not kept.
                aliases = st.cache.aliases_of(name)
                fire(name, I.DATA_ERROR_DROP, now, detail)
                self._forget(st, name)
                events.append(ResourceRemoved(st.type_url, name, "data_error", aliases))
            else:
                fire(name, I.INVALID_UPDATE, now, detail)
        self._replies.append(_Reply(st.type_url, nonce, st.version, status))
        events.append(
            ResponseRejected(
                st.type_url, nonce, version, dict(errors), control_plane, valid, invalid
            )
        )
