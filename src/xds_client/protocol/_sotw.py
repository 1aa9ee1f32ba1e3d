"""State-of-the-world (SotW) xDS: every response carries the whole set requested."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from itertools import compress, repeat
from operator import is_, is_not
from typing import TYPE_CHECKING, Any

from envoy.config.core.v3.base_pb2 import ControlPlane
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest
from envoy.service.discovery.v3.discovery_pb2 import ResourceError as ResourceErrorMessage
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.message import DecodeError

from xds_client.errors import ProtocolUsageError, ResourceDecodeError, ResourceError
from xds_client.resources import (
    RESOURCE_WRAPPER_TYPE_URL,
    TYPE_URL_PREFIX,
    ResourceType,
    unwrap,
)

from ._base import _TTL, ProtocolCore, TypeState
from ._cache import CachedResource, any_prefix, varint
from ._events import Event, UpdateBatch
from ._subscriptions import WILDCARD, Subscription
from ._validation import (
    RESPONSE_KEY,
    ResourceCheck,
    name_field_of,
    resource_check,
    resource_name,
    twin_type_url,
)

if TYPE_CHECKING:
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse
    from google.protobuf.message import Message

    from ._raw import RawDiscoveryResponse

__all__ = ["SotwProtocol"]

_WRAPPERS = frozenset(
    {RESOURCE_WRAPPER_TYPE_URL, TYPE_URL_PREFIX + "envoy.api.v2.Resource"}
)  # fmt: skip


_NO_ANY = AnyMessage()
is_not_none = partial(is_not, None)
_PLAIN_DECODE = ResourceType.decode


def _bare_value(blob: bytes, prefix: bytes) -> bytes | None:
    """The value of a serialized ``Any`` that is exactly ``prefix``, a length and the value.

    None for any other encoding (other type, fields in another order, extra
    fields): the caller then parses the ``Any``, which gives the same answer.
    """
    if not blob.startswith(prefix):
        return None
    pos = len(prefix)
    # The usual sizes first: a value shorter than 128 or 16,384 bytes.
    length = len(blob) - pos - 1
    if length < 0x80:
        return blob[pos + 1 :] if length >= 0 and blob[pos] == length else None
    length -= 1
    if length < 0x4000 and blob[pos] == (length & 0x7F) | 0x80 and blob[pos + 1] == length >> 7:
        return blob[pos + 2 :]
    size = len(blob)
    length = shift = 0
    while pos < size and shift < 35:
        byte = blob[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            return blob[pos:] if size - pos == length else None
        shift += 7
    return None


def _plain_head(prefix: bytes, size: int) -> tuple[bytes, int]:
    """How the plain encoding of an ``Any`` of ``size`` bytes starts (``prefix``, then
    the value's length as a varint), and that head's length. When no value fits, a
    head longer than ``size``, which no ``Any`` of that size starts with."""
    for width in range(1, 6):
        length = size - len(prefix) - width
        if length < 0:
            break
        head = prefix + varint(length)
        if len(head) == len(prefix) + width:
            return head, len(head)
    return bytes(size + 1), size + 1  # (only at a width's boundary: one size per width)


def _valid_count(
    subs: Subscription,
    items: Mapping[str, _Item | int | None],
    errors: Mapping[str, str],
    wrappers: int,
) -> int:
    """How many of a response's named resources (``items``, ``wrappers`` of them in
    ``Resource`` wrappers) are wanted and passed validation, unchanged ones included
    (gRFC A78 counts them); the errors name the others, and unwanted ones were not
    judged."""
    if subs.wildcard:
        wanted = len(items)
    elif not wrappers and not subs.has_globs:  # no aliases, no globs: names only
        wanted = len(subs.names.keys() & items.keys())
    else:
        wants = subs.wants
        wanted = sum(
            1 for name, item in items.items()
            if wants(name, item.aliases if type(item) is _Item else ())
        )  # fmt: skip
    return wanted - sum(1 for name in errors if name in items)


def _decoded_parts(
    response: DiscoveryResponse | RawDiscoveryResponse,
) -> tuple[str | None, str, Sequence[Any]]:
    """The sub-messages a raw response keeps serialized, decoded here and nowhere else:
    ``control_plane``'s identifier and the ``resource_errors`` (TP3). The first result
    names the field that does not decode (the whole response is then NACKed), else None.

    A parsed ``DiscoveryResponse`` has them decoded already (its parse would have
    failed on a corrupt one).
    """
    given = response.control_plane
    reported: Sequence[Any] = response.resource_errors
    if not isinstance(given, bytes):
        return None, given.identifier, reported
    plane = ""
    if given:
        try:
            plane = ControlPlane.FromString(given).identifier
        except DecodeError as exc:
            return _corrupt("control_plane", "envoy.config.core.v3.ControlPlane", exc), "", ()
    errors: list[Any] = []
    for index, blob in enumerate(reported):
        try:
            errors.append(ResourceErrorMessage.FromString(blob))
        except DecodeError as exc:
            where = f"resource_errors[{index}]"
            problem = _corrupt(where, "envoy.service.discovery.v3.ResourceError", exc)
            return problem, plane, ()
    return None, plane, errors


def _heartbeats_only(items: dict[str, _Item | int | None], wrappers: int) -> bool:
    """Whether every resource of a (non-empty) response is a wrapper without a body."""
    if not items or wrappers != len(items):
        return False
    return all(type(item) is _Item and item.raw is None for item in items.values())


def _corrupt(field: str, message: str, exc: DecodeError) -> str:
    reason = str(exc) or type(exc).__name__
    return f"{field} is not a valid {message}: {reason}"


class _Stream:
    """What this stream has told the server about one type."""

    __slots__ = ("dirty", "sent_nonempty")

    def __init__(self) -> None:
        self.sent_nonempty = False  # after a non-empty name list, [] no longer means wildcard
        self.dirty = False  # the subscription changed since the last request


class _Item:
    """One resource of a response, read and named, before it is applied."""

    __slots__ = ("aliases", "message", "metadata", "name", "raw", "resource_version", "ttl")

    def __init__(  # noqa: PLR0917 - internal, one per changed resource
        self,
        name: str,
        raw: bytes | None,  # None: heartbeat
        message: Message | None,  # decoded already (to learn the name), or None
        ttl: float | None,
        resource_version: str,
        aliases: tuple[str, ...],
        metadata: Message | None = None,  # the wrapper's metadata
    ) -> None:
        self.name = name
        self.raw = raw
        self.message = message
        self.ttl = ttl
        self.resource_version = resource_version
        self.aliases = aliases
        self.metadata = metadata


class SotwProtocol(ProtocolCore[_Stream]):
    """Sans-I/O state of one SotW stream (ADS with many types, or one per-type stream).

    Feed it subscription changes, stream events, responses and ``now``; send
    what :meth:`requests_to_send` returns and report each with
    :meth:`request_sent`; hand the events to watchers. The object outlives
    streams: call :meth:`connected` and :meth:`disconnected` for each one.
    Polling transports drive it as one long stream (see :meth:`current_request`).
    """

    _sotw_only = True

    # ----------------------------------------------------------------- framing

    def _new_stream(self) -> _Stream:
        return _Stream()

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

    def receive(
        self, response: DiscoveryResponse | RawDiscoveryResponse, now: float
    ) -> list[Event]:
        """Apply a response; queues exactly one ACK or NACK and returns the events.

        A response of a type with nothing subscribed is ignored (no ACK/NACK),
        but its nonce is remembered for the next request. ``response`` may also
        be a response parsed with its resources left serialized (the gRPC
        transport's ``RawDiscoveryResponse``): each resource is then the bytes of
        its ``Any``, and one that arrived as the same bytes before is recognised
        without parsing it.
        """
        events: list[Event] = []
        for event in self.receive_batched(response, now):
            if type(event) is UpdateBatch:
                events.extend(event.updates())
            else:
                events.append(event)  # type: ignore[arg-type]
        return events

    def receive_batched(
        self, response: DiscoveryResponse | RawDiscoveryResponse, now: float
    ) -> list[Event | UpdateBatch]:
        """:meth:`receive`, with the updates of bare resources stored in one go given as
        one :class:`UpdateBatch` each (the clients deliver it to watchers as it is)."""
        self._require_connected("receive")
        type_url = response.type_url
        st = self._types.get(type_url)
        if st is None:
            return []
        st.nonce = response.nonce
        if not st.subs.active:
            return []
        events: list[Any] = []
        version = response.version_info
        errors: dict[str, str] = {}
        corrupt, plane, reported = _decoded_parts(response)
        if corrupt is not None:
            self._finish(
                st, nonce=response.nonce, version=version, errors={RESPONSE_KEY: corrupt},
                now=now, events=events, invalid=len(response.resources),
            )  # fmt: skip
            return events
        check = resource_check(self.config, type_url, now)
        whole, items, unnamed, payload, reasons, wrappers = self._parse(st, response, errors, check)
        if whole is not None:
            self._finish(
                st, nonce=response.nonce, version=version, errors={RESPONSE_KEY: whole},
                now=now, events=events, control_plane=plane, invalid=len(response.resources),
            )  # fmt: skip
            return events
        self._apply(
            st, version=version, items=items, payload=payload, reasons=reasons,
            wrappers=wrappers, unnamed=unnamed, errors=errors, now=now, events=events, check=check,
            control_plane=plane,
            kept=self._reported_names(reported) if len(reported) else None,
        )  # fmt: skip
        if len(reported) and not (errors and self.config.reject_whole_response):
            self._resource_errors(st, reported, version, now, events)
        self._finish(
            st, nonce=response.nonce, version=version, errors=errors,
            failed=[n for n in errors if n in st.subs.names or n in st.cache
                    or (st.subs.wildcard and n in items)],
            now=now, events=events, control_plane=plane,
            valid=_valid_count(st.subs, items, errors, wrappers),
        )  # fmt: skip
        return events

    def _parse(
        self,
        st: TypeState,
        response: DiscoveryResponse | RawDiscoveryResponse,
        errors: dict[str, str],
        check: ResourceCheck | None,
    ) -> tuple[
        str | None, dict[str, _Item | int | None], bool, dict[str, Any], dict[str, str], int
    ]:  # fmt: skip
        """Name every resource; a problem of the whole response comes back first.

        A bare resource whose content key (the hash of its plain ``Any``, see
        :class:`TypeCache`) is a cached one's maps to None: it is neither decoded nor
        copied (the common case of a large re-push). Any other bare resource maps to
        its key, and its payload (the decoded message, or its bytes in lean mode) is
        in the fourth result: no per-resource record is built. A wanted one is checked
        here, where its bytes are at hand (the fifth result has the reasons to reject);
        lean mode then drops the message at once, so the messages of a large response
        are never all alive.

        For a raw response (each resource the serialized bytes of its ``Any``), every
        resource that arrived as the same bytes before is named by one pass in C,
        and only the others go through the loop.
        """
        type_url = st.type_url
        if st.rtype is None:
            return f"type URL {type_url} is not registered with this client", {}, False, {}, {}, 0
        resources: Sequence[AnyMessage | bytes] = response.resources
        items: dict[str, _Item | int | None] = {}
        todo: Iterable[tuple[int, AnyMessage | bytes]]
        batched = False
        index = st.cache.keys_index()
        new = not index  # nothing cached is recognised by its bytes
        if index and resources and type(resources[0]) is bytes:
            # Each read of a resource copies it: read, hashed and freed one by one.
            names = list(map(index.get, map(hash, resources)))
            hits = list(filter(None, names))
            if hits:
                items = dict.fromkeys(hits)
                # A hit is trusted on its 64-bit keyed hash, as Envoy trusts its 64-bit
                # hash of a cluster to skip an update (docs/protocol.md).
                if len(items) == len(hits):
                    misses = compress(range(len(names)), map(is_, names, repeat(None)))
                    todo = [(i, resources[i]) for i in misses]  # only the misses read again
                    batched = True
                else:  # the same bytes twice: the loop finds the first problem in order
                    items = {}
            else:
                new = True
        if not batched:
            todo = enumerate(resources)
            if new and resources and type(resources[0]) is bytes:
                # Nothing cached to recognise: the common first push (or a new server).
                fast = self._name_plain(st, resources, check)  # type: ignore[arg-type]
                if fast is not None:
                    return None, fast[0], False, fast[1], fast[2], 0
        elif todo:
            givens = [given for _, given in todo]
            fast = self._name_plain(st, givens, check)  # type: ignore[arg-type]
            if fast is not None and fast[0].keys().isdisjoint(items):
                items.update(fast[0])
                return None, items, False, fast[1], fast[2], 0
        found = self._name_all(st, todo, items, errors, check, lookup=not batched)
        if found[0] is not None and batched:
            # Report the same first problem as the loop over every resource would.
            errors.clear()
            items = {}
            found = self._name_all(st, enumerate(resources), items, errors, check, lookup=True)
        whole, unnamed, payload, reasons, wrappers = found
        if whole is not None:
            return whole, {}, False, {}, {}, 0
        return None, items, unnamed, payload, reasons, wrappers

    def _name_plain(
        self, st: TypeState, resources: Sequence[bytes], check: ResourceCheck | None
    ) -> tuple[dict[str, _Item | int | None], dict[str, Any], dict[str, str]] | None:
        """:meth:`_name_all` for a run of raw resources that are all new, all bare, in the
        plain encoding of this type's ``Any`` and named by their name field: the names'
        keys, the payloads and the reasons to reject, as :meth:`_name_all` gives them.

        None for anything else (another encoding or type, a resource that does not
        decode or has no name, a name twice): the caller then runs the general loop,
        which finds the same resources and reports the problem. Nothing here changes
        any state, so giving up costs only the work done so far.
        """
        rtype = st.rtype
        assert rtype is not None
        message_class = rtype.message_class
        name_field = name_field_of(message_class)
        if name_field is None or type(rtype).decode is not _PLAIN_DECODE:
            return None
        decode = message_class.FromString
        lean = self.config.lazy_decode
        subs = st.subs
        wildcard, subscribed, wants = subs.wildcard, subs.names, subs.wants
        prefix = any_prefix(st.type_url)
        heads: dict[int, tuple[bytes, int]] = {}  # by the size of the Any
        items: dict[str, _Item | int | None] = {}
        payload: dict[str, Any] = {}
        reasons: dict[str, str] = {}
        try:
            for given in resources:
                # The plain encoding: the head its size gives, then the value. One slice
                # and one comparison (bytes indexing and int arithmetic cost twice that).
                try:
                    head, at = heads[len(given)]
                except KeyError:
                    head, at = heads[len(given)] = _plain_head(prefix, len(given))
                if given[:at] != head:
                    return None
                value = given[at:]
                bare = decode(value)
                name = getattr(bare, name_field)
                if not name:
                    return None
                if check is not None and (wildcard or name in subscribed or wants(name)):
                    why = check(bare, value)
                    if why is not None:
                        reasons[name] = why
                    elif check.fresh:
                        bare = decode(value)  # the check grew its arena: keep a new one
                items[name] = hash(given)
                payload[name] = value if lean else bare
        except (DecodeError, RuntimeError, ValueError):  # from FromString
            return None
        if len(items) != len(resources):
            return None  # a name twice: the loop reports the first one
        return items, payload, reasons

    def _name_all(
        self,
        st: TypeState,
        resources: Iterable[tuple[int, AnyMessage | bytes]],
        items: dict[str, _Item | int | None],
        errors: dict[str, str],
        check: ResourceCheck | None,
        *,
        lookup: bool,
    ) -> tuple[str | None, bool, dict[str, Any], dict[str, str], int]:
        """The loop of :meth:`_parse` over ``(index, resource)``, filling ``items``; also
        the payloads, the reasons to reject bare ones and how many came in wrappers."""
        type_url = st.type_url
        rtype = st.rtype
        assert rtype is not None
        payload: dict[str, Any] = {}
        reasons: dict[str, str] = {}
        unnamed = False
        cache = st.cache
        key_for = cache.key_for
        lean = self.config.lazy_decode
        subs = st.subs
        wildcard, subscribed, wants = subs.wildcard, subs.names, subs.wants
        # ResourceType.decode() inlined (a call less per resource); its error on failure.
        stock = type(rtype).decode is _PLAIN_DECODE  # not overridden (or patched by a test)
        decode = rtype.message_class.FromString if stock else rtype.decode
        # resource_name() inlined for the common case; called on failure for its error.
        name_field = name_field_of(rtype.message_class)
        by_key = cache.keys_index()
        by_key_get = by_key.get
        prefix = any_prefix(type_url)
        length_at = len(prefix)
        body_at = length_at + 2
        twin = twin_type_url(type_url)  # A30: the other API version's URL is accepted
        parse_any = AnyMessage.FromString
        packed = _NO_ANY
        wrappers = 0
        for index, given in resources:
            value: bytes | None = None
            key: int | None = None
            if type(given) is bytes:  # a raw response: the serialized Any
                # _bare_value() inlined for a value of 128 to 16,383 bytes (two-byte length).
                size = len(given) - body_at
                if (
                    0x80 <= size < 0x4000 and given[length_at] == (size & 0x7F) | 0x80
                    and given[length_at + 1] == size >> 7 and given.startswith(prefix)
                ):  # fmt: skip
                    value = given[body_at:]
                else:
                    value = _bare_value(given, prefix)
                if value is not None:  # the plain encoding: its hash is the key
                    key = hash(given)
                    packed_type = type_url
                else:  # not the plain encoding of a bare resource
                    try:
                        packed = parse_any(given)
                    except DecodeError:
                        errors[f"resources[{index}]"] = "not a valid google.protobuf.Any"
                        unnamed = True
                        continue
                    packed_type = packed.type_url
            else:
                assert isinstance(given, AnyMessage)
                packed = given
                packed_type = packed.type_url
            if packed_type in (type_url, twin):
                if value is None:
                    value = packed.value
                    key = key_for(value)
                    name = by_key_get(key) if by_key else None
                elif lookup and by_key:
                    name = by_key_get(key)  # type: ignore[arg-type]
                else:
                    name = None  # a miss of the batched lookup, or nothing cached
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
                    except (DecodeError, RuntimeError, ValueError) as exc:  # from FromString
                        reason = str(exc) or type(exc).__name__
                        errors[f"resources[{index}]"] = str(
                            ResourceDecodeError(rtype.type_url, reason)
                        )
                        unnamed = True
                        continue
                    if name in items:
                        return f"resource name {name!r} appears more than once", False, {}, {}, 0
                    items[name] = key
                    # Checked now, where its bytes are at hand; unwanted ones are not
                    # checked, as in _apply. Lean mode keeps only the bytes.
                    if check is not None and (
                        wildcard or name in subscribed or wants(name)
                    ):  # fmt: skip
                        why = check(bare, value if stock else None)
                        if why is not None:
                            reasons[name] = why
                        elif check.fresh:
                            bare = decode(value)  # the check grew its arena: keep a new one
                    payload[name] = value if lean else bare
                    continue
                if name in items:
                    return f"resource name {name!r} appears more than once", False, {}, {}, 0
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
                if wrapped.body is not None and wrapped.body.type_url not in (type_url, twin):
                    return (
                        f"resources[{index}] wraps {wrapped.body.type_url}, "
                        f"but the response is for {type_url}",
                        False, {}, {}, 0,
                    )  # fmt: skip
                raw = None if wrapped.body is None else wrapped.body.value
                name = wrapped.name or (None if raw is None else by_key_get(key_for(raw)))
                ttl = wrapped.ttl
                rversion = wrapped.version
                aliases = wrapped.aliases
                metadata = wrapped.metadata
            else:
                return (
                    f"resources[{index}] has type {packed_type}, "
                    f"but the response is for {type_url}",
                    False, {}, {}, 0,
                )  # fmt: skip
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
                except (DecodeError, RuntimeError, ValueError) as exc:  # from FromString
                    reason = str(exc) or type(exc).__name__
                    errors[f"resources[{index}]"] = str(ResourceDecodeError(rtype.type_url, reason))
                    unnamed = True
                    continue
            if name in items:
                return f"resource name {name!r} appears more than once", False, {}, {}, 0
            if ttl is not None and ttl < 0:
                errors[name] = f"ttl {ttl:g}s is negative"
                continue
            items[name] = _Item(name, raw, message, ttl, rversion, aliases, metadata)
            wrappers += 1
        return None, unnamed, payload, reasons, wrappers

    def _store_bare(  # noqa: PLR0917 - positional like _store
        self,
        st: TypeState,
        names: list[str],
        items: dict[str, _Item | int | None],
        payload: dict[str, Any],
        version: str,
        control_plane: str,
        now: float,
        events: list[Any],
    ) -> None:
        """``_store()`` of bare resources with no state row and no timer, in bulk: one
        cache call and one :class:`UpdateBatch` for them all."""
        cache = st.cache
        record = cache.record(version, now)
        if len(names) == len(payload):  # every changed one (payload is in their order)
            values = list(payload.values())
            if len(items) == len(names):  # and nothing else: items is their keys, in order
                cache.put_bare_dict(payload, items, record)  # type: ignore[arg-type]
            else:
                keys: list[int] = list(map(items.__getitem__, names))  # type: ignore[arg-type]
                cache.put_bare(names, values, keys, record)
        else:
            values = list(map(payload.__getitem__, names))
            keys = list(map(items.__getitem__, names))  # type: ignore[arg-type]
            cache.put_bare(names, values, keys, record)
        decode = cache.decode if self.config.lazy_decode else None
        events.append(UpdateBatch(st.type_url, version, control_plane, names, values, decode))

    @staticmethod
    def _reported_names(reported: Iterable[Any]) -> set[str]:
        return {error.resource_name.name for error in reported}

    def _apply(
        self,
        st: TypeState,
        *,
        version: str,
        items: dict[str, _Item | int | None],
        payload: dict[str, Any],
        reasons: dict[str, str],
        wrappers: int,
        unnamed: bool,
        errors: dict[str, str],
        now: float,
        events: list[Any],
        check: ResourceCheck | None,
        kept: set[str] | None = None,
        control_plane: str = "",
    ) -> None:
        rtype = st.rtype
        assert rtype is not None
        subs = st.subs
        wildcard = subs.wildcard
        names = subs.names
        wants = subs.wants
        cache = st.cache
        cached = cache.values.get
        # Names of the changed bare resources, in order: their keys are in ``items``
        # and their messages (or bytes) in ``payload`` (no record per resource).
        staged: list[str] = []
        staged_items: list[tuple[_Item, Message | None, int | None]] = []
        refreshes: list[_Item] = []
        quiet = not st.states.held  # no cached resource is NACKED, in error or kept (A53)
        todo: Iterable[tuple[str, _Item | int | None]] = items.items()
        if quiet and not cache.renewable and not wrappers and wildcard:
            # The common large push: every resource bare and wanted, nothing to renew,
            # each one checked as it was named (_parse). The changed ones, in order.
            todo = ()
            staged = list(payload)  # exactly the changed bare ones, in order
            if reasons:
                errors.update((name, reasons[name]) for name in staged if name in reasons)
                staged = [name for name in staged if name not in reasons]
        elif quiet and not cache.renewable:
            # No cached entry has a TTL or a per-resource version, so a resource sent
            # again with the same bytes changes nothing: only the others are visited.
            todo = compress(todo, map(is_not_none, items.values()))
        for name, item in todo:
            if item is None:  # a bare resource with the bytes of the cached one
                value = cached(name)
                if value is None or not (wildcard or name in names or wants(name)):
                    continue
                if not isinstance(value, CachedResource):  # bare: no TTL, no version
                    if quiet:
                        continue  # a refresh would change nothing
                elif quiet and value.ttl is None and not value.resource_version:
                    continue
                refreshes.append(_Item(name, b"", None, None, "", ()))
                continue
            if type(item) is int:  # a bare resource, decoded to learn its name
                if not (wildcard or name in names or wants(name)):
                    continue
                # Its key differs from every cached resource's, so it is an update,
                # checked as it was named (_parse).
                reason = reasons.get(name)
                if reason is not None:
                    errors[name] = reason
                    continue
                staged.append(name)
                continue
            assert isinstance(item, _Item)
            if not wildcard and name not in names and not wants(name, item.aliases):
                continue
            value = cached(name)
            if item.raw is None:
                if value is None:
                    continue  # heartbeat for something we do not hold: nothing to keep alive
                # Envoy (SotW) takes a bodiless wrapper as a heartbeat when the response's
                # version_info is the type's accepted one, reading no version from the
                # wrapper (go-control-plane sets none); ours also when the wrapper's
                # version is the resource's or the accepted one.
                held = value.resource_version if isinstance(value, CachedResource) else ""
                if version != st.version and item.resource_version not in (held, st.version):
                    errors[name] = (
                        f"heartbeat version {item.resource_version!r} does not match "
                        f"held version {held!r}"
                    )
                    continue
                refreshes.append(item)
                continue
            if value is not None:
                if isinstance(value, CachedResource):  # kept whole, with its bytes
                    same = value.raw == item.raw
                else:
                    same = cache.key_of(name) == cache.key_for(item.raw)
                if same:
                    refreshes.append(item)
                    continue
            message = item.message
            data = None  # the bytes it was parsed from by its class, when known
            if message is None:
                try:
                    message = rtype.decode(item.raw)
                except ResourceError as exc:
                    errors[name] = str(exc)
                    continue
                if type(rtype).decode is _PLAIN_DECODE:
                    data = item.raw
            if check is not None:
                reason = check(message, data)
                if reason is not None:
                    errors[name] = reason
                    continue
                if check.fresh:
                    message = rtype.decode(item.raw)  # the check grew its arena: a new one
            name_field = name_field_of(rtype.message_class)
            renamed = name_field is not None and getattr(message, name_field) != name
            # Indexed by its content unless its body names another resource (the same
            # bytes sent bare would name that one).
            key = None if renamed else cache.key_for(item.raw)
            staged.append(name)
            staged_items.append((item, message, key))
        if errors and self.config.reject_whole_response:
            return
        for item in refreshes:
            entry = cache.get(item.name)
            assert entry is not None
            # Received with no TTL, even as a heartbeat: its timer is removed (seed:
            # discovery.proto, Resource.ttl).
            self._refresh(
                st, entry, ttl=item.ttl, version=None,
                resource_version=item.resource_version, now=now, events=events,
                announced=version, control_plane=control_plane,
            )  # fmt: skip
        if staged and not staged_items and not st.states.status and not self._timers.armed:
            self._store_bare(st, staged, items, payload, version, control_plane, now, events)
        elif staged:
            self._store_staged(
                st, staged, staged_items, items, payload, version, control_plane, now, events
            )
        if rtype.full_state and not unnamed and not _heartbeats_only(items, wrappers):
            # LDS/CDS: a resource we hold that the response leaves out was deleted.
            # Skipped when a resource could not even be named: it may be that one; and
            # for a response of heartbeats only, which go-control-plane sends with just
            # the resources that have a TTL (Envoy then deletes all the others).
            held_names = cache.values.keys()
            gone = [] if held_names <= items.keys() else [n for n in held_names if n not in items]
            for name in gone:
                if kept is not None and name in kept:
                    continue  # left out with an error reported for it (TP3): not deleted
                self._delete(st, name, now, events)

    def _store_staged(  # noqa: PLR0917 - positional, once per response
        self,
        st: TypeState,
        staged: list[str],
        staged_items: list[tuple[_Item, Message | None, int | None]],
        items: dict[str, _Item | int | None],
        payload: dict[str, Any],
        version: str,
        control_plane: str,
        now: float,
        events: list[Any],
    ) -> None:
        """Cache and announce the changed resources, in order."""
        store = self._store
        wrapped = iter(staged_items)
        lean = self.config.lazy_decode
        # A bare resource with no state row and no timer is what _store() would cache
        # and announce with no side effect: such runs go in one call each.
        status = st.states.status
        armed = self._timers.armed
        type_url = st.type_url
        run: list[str] = []
        for name in staged:
            key = items[name]
            if type(key) is int:
                if name not in status and not (armed and (_TTL, type_url, name) in armed):
                    run.append(name)
                    continue
                if run:
                    self._store_bare(st, run, items, payload, version, control_plane, now, events)
                    run = []
                value = payload[name]  # its bytes in lean mode, else its message
                store(
                    st, name, version, None if lean else value, value if lean else b"", None,
                    (), "", None, control_plane, now, events, key,
                )  # fmt: skip
                continue
            if run:
                self._store_bare(st, run, items, payload, version, control_plane, now, events)
                run = []
            item, message, index_key = next(wrapped)
            assert item.raw is not None
            store(
                st, name, version, message, item.raw, item.ttl, item.aliases,
                item.resource_version, item.metadata, control_plane, now, events, index_key,
            )  # fmt: skip
        if run:
            self._store_bare(st, run, items, payload, version, control_plane, now, events)
