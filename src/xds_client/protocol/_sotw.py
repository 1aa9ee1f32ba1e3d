"""State-of-the-world (SotW) xDS: every response carries the whole set requested."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xds_client.errors import ProtocolUsageError, ResourceError
from xds_client.resources import RESOURCE_WRAPPER_TYPE_URL, TYPE_URL_PREFIX, unwrap

from ._base import ProtocolCore, TypeState
from ._config import ProtocolConfig
from ._events import Event
from ._subscriptions import WILDCARD
from ._validation import RESPONSE_KEY, name_field_of, resource_name, validate

if TYPE_CHECKING:
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
    from google.protobuf.message import Message

__all__ = ["SotwProtocol"]

_WRAPPERS = frozenset(
    {RESOURCE_WRAPPER_TYPE_URL, TYPE_URL_PREFIX + "envoy.api.v2.Resource"}
)  # fmt: skip


@dataclass(slots=True)
class _Stream:
    """What this stream has told the server about one type."""

    sent_nonempty: bool = False  # after a non-empty name list, [] no longer means wildcard
    dirty: bool = False  # the subscription changed since the last request


@dataclass(slots=True)
class _Item:
    name: str
    raw: bytes | None  # None: heartbeat
    message: Message | None  # decoded already (to learn the name), or None
    ttl: float | None
    resource_version: str
    aliases: tuple[str, ...]


class SotwProtocol(ProtocolCore):
    """Sans-I/O state of one SotW stream (ADS with many types, or one per-type stream).

    Feed it subscription changes, stream events, responses and ``now``; send
    what :meth:`requests_to_send` returns and report each with
    :meth:`request_sent`; hand the events to watchers. The object outlives
    streams: call :meth:`connected` and :meth:`disconnected` for each one.
    Polling transports drive it as one long stream (see :meth:`current_request`).
    """

    _sotw_only = True

    def __init__(self, config: ProtocolConfig) -> None:
        super().__init__(config)
        self._streams_state: dict[str, _Stream] = {}

    # ----------------------------------------------------------------- framing

    def _stream(self, st: TypeState) -> _Stream:
        ss = self._streams_state.get(st.type_url)
        if ss is None:
            ss = self._streams_state[st.type_url] = _Stream()
        return ss

    def _reset_stream(self, st: TypeState) -> None:
        self._streams_state[st.type_url] = _Stream()

    def _on_subscribed(self, st: TypeState, added: list[str], wildcard: bool) -> None:
        self._stream(st).dirty = True

    def _on_unsubscribed(self, st: TypeState, removed: list[str], wildcard: bool) -> None:
        self._stream(st).dirty = True

    def _names(self, st: TypeState, ss: _Stream) -> list[str]:
        subs = st.subs
        if subs.wildcard:
            if not subs.names and not ss.sent_nonempty:
                return []  # the legacy wildcard: understood by every server
            return [WILDCARD, *subs.names]
        return list(subs.names)

    def _request(self, st: TypeState, version: str, nonce: str) -> DiscoveryRequest:
        from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest

        ss = self._stream(st)
        names = self._names(st, ss)
        request = DiscoveryRequest(
            type_url=st.type_url, version_info=version, response_nonce=nonce,
            resource_names=names,
        )  # fmt: skip
        if names:
            ss.sent_nonempty = True
        ss.dirty = False
        st.initial_sent = True
        return request

    def requests_to_send(self) -> list[DiscoveryRequest]:
        """Drain the requests owed to the server, in order.

        First one ACK or NACK per response received (carrying the current
        name list, so it also announces subscription changes), then one
        request per type whose subscription changed or that this stream has
        not requested yet. Empty while disconnected.
        """
        if not self._connected:
            return []
        out: list[DiscoveryRequest] = []
        replies, self._replies = self._replies, []
        for reply in replies:
            st = self._types[reply.type_url]
            request = self._request(st, reply.version, reply.nonce)
            if reply.error is not None:
                request.error_detail.CopyFrom(reply.error)
            self._with_node(request)
            out.append(request)
        for st in self._types.values():
            ss = self._stream(st)
            if st.initial_sent:
                if not ss.dirty:
                    continue
                if not st.subs.active and not ss.sent_nonempty:
                    # Only the legacy wildcard [] went out: an empty list would
                    # still mean "everything", so say nothing; responses are ignored.
                    ss.dirty = False
                    continue
            elif not st.subs.active:
                continue
            request = self._request(st, st.version, st.nonce)
            self._with_node(request)
            out.append(request)
        return out

    def current_request(self, type_url: str) -> DiscoveryRequest:
        """The request a poller sends now for ``type_url``.

        It carries ``node``, the last accepted version, the full name list,
        the last nonce, and the last ``error_detail`` while the latest
        response stays rejected. It changes no state.
        """
        from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest

        st = self._types.get(type_url)
        if st is None or not st.subs.active:
            raise ProtocolUsageError(f"nothing is subscribed for {type_url}")
        ss = self._streams_state.get(type_url) or _Stream()
        request = DiscoveryRequest(
            type_url=type_url, version_info=st.version, response_nonce=st.nonce,
            resource_names=self._names(st, ss), node=self.config.node,
        )  # fmt: skip
        if st.last_error is not None:
            request.error_detail.CopyFrom(st.last_error)
        return request

    def request_sent(self, request: DiscoveryRequest, now: float) -> None:
        """The driver put ``request`` on the wire: start does-not-exist timers for it."""
        st = self._types.get(request.type_url)
        if st is not None:
            self._start_dne_timers(st, request.resource_names, now)

    # ----------------------------------------------------------------- responses

    def receive(self, response: DiscoveryResponse, now: float) -> list[Event]:
        """Apply a response; queues exactly one ACK or NACK and returns the events.

        A response of a type with nothing subscribed is ignored (no ACK/NACK),
        but its nonce is remembered for the next request.
        """
        self._require_connected("receive")
        type_url = response.type_url
        st = self._types.get(type_url)
        if st is None:
            return []
        st.nonce = response.nonce
        if not st.subs.active:
            return []
        events: list[Event] = []
        version = response.version_info
        errors: dict[str, str] = {}
        whole, items, unnamed, decoded = self._parse(st, response, errors)
        if whole is not None:
            self._finish(
                st, nonce=response.nonce, version=version,
                errors={RESPONSE_KEY: whole}, now=now, events=events,
            )  # fmt: skip
            return events
        self._apply(
            st, version=version, items=items, decoded=decoded, unnamed=unnamed, errors=errors,
            now=now, events=events,
        )  # fmt: skip
        self._finish(
            st, nonce=response.nonce, version=version, errors=errors,
            failed=[n for n in errors if n in st.subs.names or n in st.cache
                    or (st.subs.wildcard and n in items)],
            now=now, events=events,
        )  # fmt: skip
        return events

    def _parse(
        self, st: TypeState, response: DiscoveryResponse, errors: dict[str, str]
    ) -> tuple[str | None, dict[str, _Item | bytes | None], bool, dict[str, Message]]:
        """Name every resource; a problem of the whole response comes back first.

        A bare resource whose bytes equal a cached one maps to None: it is
        neither decoded nor copied (the common case of a large re-push). Any
        other bare resource maps to its bytes, and its decoded message is in
        the fourth result: no per-resource record is built (each one would
        survive the whole response and make the garbage collector run more).
        """
        type_url = st.type_url
        rtype = st.rtype
        if rtype is None:
            return (
                f"type URL {type_url} is not registered with this client",
                {},
                False,
                {},
            )
        items: dict[str, _Item | bytes | None] = {}
        decoded: dict[str, Message] = {}
        unnamed = False
        cache = st.cache
        name_of_raw = cache.name_of_raw
        decode = rtype.decode
        # resource_name() inlined for the common case; called on failure for its error.
        name_field = name_field_of(rtype.message_class)
        for index, packed in enumerate(response.resources):
            packed_type = packed.type_url
            if packed_type == type_url:
                value: bytes = packed.value
                name = name_of_raw(value)  # same bytes as cached: no decode
                if name is None:
                    try:
                        bare = decode(value)
                        name = "" if name_field is None else getattr(bare, name_field)
                        if not name or type(name) is not str:
                            name = resource_name(bare)
                    except ResourceError as exc:
                        errors[f"resources[{index}]"] = str(exc)
                        unnamed = True
                        continue
                    if name in items:
                        return f"resource name {name!r} appears more than once", {}, False, {}
                    items[name] = value
                    decoded[name] = bare
                    continue
                if name in items:
                    return f"resource name {name!r} appears more than once", {}, False, {}
                items[name] = None
                continue
            message: Message | None = None
            if packed_type in _WRAPPERS:
                try:
                    wrapped = unwrap(packed)
                except ResourceError as exc:
                    errors[f"resources[{index}]"] = str(exc)
                    unnamed = True
                    continue
                if wrapped.body is not None and wrapped.body.type_url != type_url:
                    return (
                        f"resources[{index}] wraps {wrapped.body.type_url}, "
                        f"but the response is for {type_url}",
                        {},
                        False,
                        {},
                    )
                raw = None if wrapped.body is None else wrapped.body.value
                name = wrapped.name or (None if raw is None else cache.name_of_raw(raw))
                ttl = wrapped.ttl
                rversion = wrapped.version
                aliases = wrapped.aliases
            else:
                return (
                    f"resources[{index}] has type {packed_type}, "
                    f"but the response is for {type_url}",
                    {},
                    False,
                    {},
                )
            if name is None:
                if raw is None:
                    errors[f"resources[{index}]"] = "heartbeat Resource wrapper has no name"
                    unnamed = True
                    continue
                try:
                    message = decode(raw)
                    name = resource_name(message)
                except ResourceError as exc:
                    errors[f"resources[{index}]"] = str(exc)
                    unnamed = True
                    continue
            if name in items:
                return f"resource name {name!r} appears more than once", {}, False, {}
            items[name] = _Item(name, raw, message, ttl, rversion, aliases)
        return None, items, unnamed, decoded

    def _apply(
        self,
        st: TypeState,
        *,
        version: str,
        items: dict[str, _Item | bytes | None],
        decoded: dict[str, Message],
        unnamed: bool,
        errors: dict[str, str],
        now: float,
        events: list[Event],
    ) -> None:
        rtype = st.rtype
        assert rtype is not None
        validator = self.config.validators.get(st.type_url)
        subs = st.subs
        wildcard = subs.wildcard
        names = subs.names
        wants = subs.wants
        cache = st.cache
        cached = cache.entries.get
        # Names of the changed bare resources, in order: their bytes are in
        # ``items`` and their messages in ``decoded`` (no record per resource).
        staged: list[str] = []
        staged_items: list[tuple[_Item, Message]] = []
        refreshes: list[_Item] = []
        quiet = not (st.failures or st.deletion_ignored or subs.ambiguous)
        for name, item in items.items():
            if item is None:  # a bare resource with the bytes of the cached one
                entry = cached(name)
                if entry is None or not (wildcard or name in names or wants(name)):
                    continue
                if quiet and entry.ttl is None and not entry.resource_version:
                    continue  # a refresh would change nothing
                refreshes.append(_Item(name, entry.raw, None, None, "", ()))
                continue
            if type(item) is bytes:  # a bare resource, decoded to learn its name
                if not (wildcard or name in names or wants(name)):
                    continue
                # Its bytes differ from every cached resource's (name_of_raw), so
                # it is an update; it still goes through the validator.
                if validator is not None:
                    reason = validate(validator, decoded[name])
                    if reason is not None:
                        errors[name] = reason
                        continue
                staged.append(name)
                continue
            assert isinstance(item, _Item)
            if not wildcard and name not in names and not wants(name, item.aliases):
                continue
            entry = cached(name)
            if item.raw is None:
                if entry is None:
                    continue  # heartbeat for something we do not hold: nothing to keep alive
                if item.resource_version != entry.resource_version:
                    errors[name] = (
                        f"heartbeat version {item.resource_version!r} does not match "
                        f"held version {entry.resource_version!r}"
                    )
                    continue
                refreshes.append(item)
                continue
            if entry is not None and entry.raw == item.raw:
                refreshes.append(item)
                continue
            message = item.message
            if message is None:
                try:
                    message = rtype.decode(item.raw)
                except ResourceError as exc:
                    errors[name] = str(exc)
                    continue
            if validator is not None:
                reason = validate(validator, message)
                if reason is not None:
                    errors[name] = reason
                    continue
            staged.append(name)
            staged_items.append((item, message))
        if errors and self.config.reject_whole_response:
            return
        for item in refreshes:
            entry = cache.get(item.name)
            assert entry is not None
            ttl = item.ttl
            if item.raw is None and ttl is None:
                ttl = entry.ttl  # a heartbeat without its own TTL renews the old one
            self._refresh(
                st, entry, ttl=ttl, version=None,
                resource_version=item.resource_version, now=now,
            )  # fmt: skip
        if staged:
            store = self._store
            wrapped = iter(staged_items)
            for name in staged:
                raw = items[name]
                if type(raw) is bytes:
                    store(st, name, version, decoded[name], raw, None, (), "", now, events)
                else:
                    item, message = next(wrapped)
                    assert item.raw is not None
                    store(
                        st, name, version, message, item.raw, item.ttl, item.aliases,
                        item.resource_version, now, events,
                    )  # fmt: skip
        if rtype.full_state and not unnamed:
            # LDS/CDS: a resource we hold that the response leaves out was deleted.
            # Skipped when a resource could not even be named: it may be that one.
            for name in [n for n in cache if n not in items]:
                self._delete(st, name, now, events)
