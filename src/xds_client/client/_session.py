"""The client's decisions, made once for both drivers.

A :class:`Session` owns the protocol core objects (one for ADS, or one per type),
the watcher registry, reconnection and fallback, CSDS and metrics. It does no
I/O and reads no clock: a driver (threads in ``_sync``, asyncio in ``_async``)
feeds it ``now``, stream responses and failures, and performs the
:data:`Action` values it returns. Every method takes :attr:`Session.lock`, so
user threads and the driver may call it concurrently.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias, Union

from typing_extensions import ParamSpec

from xds_client._clock import monotonic_to_wall
from xds_client._gc import LARGE_RESPONSE, collector_paused
from xds_client._records import Value, replace
from xds_client.errors import ClientClosedError, ResourceNameError, UsageError
from xds_client.federation import authority_label, is_xdstp, normalize_name, parse_xdstp
from xds_client.protocol import (
    RESPONSE_KEY,
    CachedResource,
    DeltaProtocol,
    Event,
    ProtocolConfig,
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
    SotwProtocol,
)
from xds_client.protocol._events import UpdateBatch
from xds_client.resources import ResourceType, resource_type
from xds_client.transport import (
    ADS_DELTA_METHOD,
    ADS_METHOD,
    V2_ADS_DELTA_METHOD,
    V2_ADS_METHOD,
    Request,
    Response,
    ServerTarget,
    StreamSpec,
)

from ._federation import AuthorityRouter
from ._options import BackoffState, ClientOptions
from ._watchers import (
    ConnectivityChanged,
    EventBuffer,
    Segment,
    WatchEntry,
    WatchEvent,
    WatchRegistry,
)

if TYPE_CHECKING:
    from envoy.service.status.v3.csds_pb2 import ClientConfig

    from ._metrics import Metrics
    from ._persist import ConfigCache, PersistedType

__all__ = [
    "Action",
    "CloseStream",
    "OpenStream",
    "ProbeServer",
    "Received",
    "SaveConfig",
    "SendRequest",
    "Session",
]

log = logging.getLogger("xds_client.client")
_P = ParamSpec("_P")

ADS_SLOT = "ads"


class OpenStream(Value):
    """Open a stream for ``slot`` to server number ``server``."""

    __slots__ = ("attempt", "server", "slot", "spec")
    _fields = ("slot", "attempt", "server", "spec")

    def __init__(self, slot: str, attempt: int, server: int, spec: StreamSpec) -> None:
        self.slot = slot
        self.attempt = attempt
        self.server = server
        self.spec = spec


class Received(Value):
    """What the reader of a stream does after :meth:`Session.receive` (one is built per
    response: a plain class, made without generated code)."""

    __slots__ = ("buffers", "delivered", "replies", "wake")
    _fields = ("replies", "wake", "buffers", "delivered")

    def __init__(
        self,
        replies: tuple[Request, ...],
        wake: bool,
        buffers: tuple[EventBuffer, ...],
        delivered: bool = False,
    ) -> None:
        self.replies = replies
        """ACKs/NACKs to send now, in order (delta only; SotW replies go with ``step``)."""
        self.wake = wake
        """The I/O worker must step: a timer moved earlier, an action is due, or SotW."""
        self.buffers = buffers
        """Held (flow control): the buffers whose events must be taken before ``release``."""
        self.delivered = delivered
        """Some watcher got events of the response (the asyncio reader lets it run first)."""


class SendRequest(Value):
    """Send ``request`` on the stream of ``slot`` (if it is still attempt ``attempt``)."""

    __slots__ = ("attempt", "request", "slot")
    _fields = ("slot", "attempt", "request")

    def __init__(self, slot: str, attempt: int, request: Request) -> None:
        self.slot = slot
        self.attempt = attempt
        self.request = request


class CloseStream(Value):
    """Close the stream of ``slot`` opened as attempt ``attempt``."""

    __slots__ = ("attempt", "slot")
    _fields = ("slot", "attempt")

    def __init__(self, slot: str, attempt: int) -> None:
        self.slot = slot
        self.attempt = attempt


class ProbeServer(Value):
    """Check whether server number ``server`` is reachable; report with ``on_probe``."""

    __slots__ = ("server", "slot")
    _fields = ("slot", "server")

    def __init__(self, slot: str, server: int) -> None:
        self.slot = slot
        self.server = server


class SaveConfig:
    """Write this type's accepted config to disk (``cache_dir``)."""

    __slots__ = ("cache", "record")

    def __init__(self, cache: ConfigCache, record: PersistedType) -> None:
        self.cache = cache
        self.record = record

    def __repr__(self) -> str:
        return f"SaveConfig({self.record!r})"

    def write(self) -> None:
        """Write the file (atomically); failures are logged, never raised."""
        self.cache.save(self.record)


Action: TypeAlias = Union[OpenStream, SendRequest, CloseStream, ProbeServer, SaveConfig]  # noqa: UP007


CANDIDATE_SUFFIX = "~primary"
"""Appended to a slot's key for the driver key of its stream to the primary (A71)."""


class _Candidate:
    """gRFC A71: the stream to the primary tried while a fallback serves.

    It carries the same subscriptions on a protocol core of its own, so nothing
    it hears reaches watchers; its first response makes it the slot's stream.
    """

    key: str
    """The driver's key for this stream (the one the slot's stream does not use)."""
    backoff: BackoffState
    """The primary's backoff: attempts that fail space out as any reconnection does."""
    retry_at: float | None
    protocol: SotwProtocol | DeltaProtocol | None
    attempt: int
    open: bool

    def __init__(self, key: str, backoff: BackoffState, retry_at: float | None) -> None:
        self.key = key
        self.backoff = backoff
        self.retry_at = retry_at
        self.protocol = None
        self.attempt = 0
        self.open = False


class _Slot:
    """One stream's worth of state: ADS has one slot, per-type mode one per type."""

    key: str
    protocol: SotwProtocol | DeltaProtocol
    backoff: BackoffState
    server: int
    attempt: int
    opened: int
    """Streams opened for this slot (its own and the candidate's): the attempt numbers."""
    stream_key: str
    """The driver's key of the slot's stream: ``key``, or the candidate key it took over."""
    open: bool
    got_response: bool
    up: bool
    """The server serves this stream: its response headers or a response came."""
    in_flight: list[Request | None]
    """Requests handed to the driver whose write is not confirmed yet, oldest first;
    None for an ACK/NACK, which starts no timer. A new stream gets a new list (never
    cleared in place): :meth:`Session.on_written` pops it without the lock."""
    held: list[Request]
    """Requests written before the stream was known ``up``: their timers wait (A57)."""
    retry_at: float | None
    candidate: _Candidate | None
    """While on a fallback: the stream to the primary (gRFC A71)."""
    ready_check_at: float
    """When to check again whether the current server's channel is up."""
    probing: bool
    probe_attempt: int
    """The stream attempt the readiness probe in flight was made for."""
    reported: bool | None
    """Connectivity last told to watchers: None before anything was told."""
    type_urls: set[str]
    base: str
    """ADS, or the type URL of a per-type stream (the key without its server group)."""
    group: tuple[int, ...]
    """The servers this stream may use, in priority order, as indices of the
    session's distinct targets; ``server`` is a position in this tuple (gRFC A47)."""
    restored_types: set[str]
    """Types whose last good config was read from disk (once per type)."""
    unconfirmed: set[tuple[str, str]]
    """(type, name) restored from disk that no accepted response has confirmed yet."""
    dirty: dict[str, PersistedType]
    """By type: the config as accepted last, not yet written to the cache directory."""
    holding: bool
    """Flow control: the last response's watchers have not taken its events yet, so
    its ACK (and the next read) waits; :meth:`Session.release` ends it."""

    def __init__(
        self,
        key: str,
        protocol: SotwProtocol | DeltaProtocol,
        backoff: BackoffState,
        *,
        retry_at: float | None = None,
        base: str = ADS_SLOT,
        group: tuple[int, ...] = (0,),
    ) -> None:
        self.key = key
        self.protocol = protocol
        self.backoff = backoff
        self.server = 0
        self.attempt = 0
        self.opened = 0
        self.stream_key = key
        self.open = False
        self.got_response = False
        self.up = False
        self.in_flight = []
        self.held = []
        self.retry_at = retry_at
        self.candidate = None
        self.ready_check_at = 0.0
        self.probing = False
        self.probe_attempt = 0
        self.reported = None
        self.type_urls = set()
        self.base = base
        self.group = group
        self.restored_types = set()
        self.unconfirmed = set()
        self.dirty = {}
        self.holding = False

    def stream_opened(self, attempt: int) -> None:
        """The slot's stream is now attempt ``attempt``: nothing of the last one carries over."""
        self.open = True
        self.attempt = attempt
        self.got_response = False
        self.up = False
        self.in_flight = []  # after ``attempt``: see Session.on_written
        self.holding = False
        self.held.clear()
        self.retry_at = None

    def protocols(self) -> list[SotwProtocol | DeltaProtocol]:
        """The slot's protocol core, and its candidate's while one is open: both subscribe."""
        candidate = self.candidate
        if candidate is None or candidate.protocol is None:
            return [self.protocol]
        return [self.protocol, candidate.protocol]


class Session:
    """Shared state and decision logic of :class:`XdsClient` and :class:`AsyncXdsClient`."""

    _short_path = True
    """Whether :meth:`receive` takes its steady-state delta path (a test turns it off
    to hold that path to the general one)."""

    def __init__(self, options: ClientOptions) -> None:
        self.options = options
        self.lock = threading.RLock()
        self.registry = WatchRegistry()
        self.closed = False
        self._slots: dict[str, _Slot] = {}
        self._pending: list[Action] = []
        self._config = ProtocolConfig(
            node=options.node,
            # Pollers send every request on its own, so each must identify the node.
            node_in_every_request=options.node_in_every_request or options.transport != "grpc",
            does_not_exist_timeout=options.does_not_exist_timeout,
            ignore_resource_deletion=options.ignore_resource_deletion,
            reject_whole_response=options.reject_whole_response,
            validate_rules=options.validate_rules,
            fail_on_data_errors=options.fail_on_data_errors,
            resource_timer_is_transient_error=options.resource_timer_is_transient_error,
            validators=dict(options.validators),
            lazy_decode=options.lazy_decode,
            wall_time=monotonic_to_wall,  # PGV's lt_now/gt_now/within rules
        )
        # A47: one list of distinct servers; each authority uses some of them in order.
        self._router = AuthorityRouter(options.servers, options.authorities)
        self._targets = tuple(self._with_backoff(t) for t in self._router.targets)
        self._cache: ConfigCache | None = None
        if options.cache_dir is not None:
            from ._persist import ConfigCache  # the cache directory's code loads with it

            self._cache = ConfigCache(
                options.cache_dir, node_id=options.node.id, persist_secrets=options.persist_secrets
            )

    # ------------------------------------------------------------------ targets

    def _with_backoff(self, target: ServerTarget) -> ServerTarget:
        if self.options.transport not in ("grpc", "grpc-fetch"):
            return target
        policy = self.options.backoff
        # Keep gRPC's own reconnect backoff in step with ours, so a restarted
        # server is reachable as soon as our backoff says to try again.
        initial_ms = max(10, int(policy.initial * 1000))
        extra: tuple[tuple[str, str | int], ...] = (
            ("grpc.initial_reconnect_backoff_ms", initial_ms),
            # Not grpc.min_reconnect_backoff_ms: that is gRPC's minimum connect timeout
            # (20 s); at our initial backoff a slow handshake could never complete.
            ("grpc.max_reconnect_backoff_ms", max(initial_ms, int(policy.maximum * 1000))),
        )
        return replace(target, channel_options=extra + target.channel_options)

    def _server_changed(self, slot: _Slot, previous: str, reason: str) -> None:
        """``slot``'s next stream goes to ``slot.server``: nothing learnt from the old
        server is sent there, and the new one's ``server_features`` apply (A53, A88).

        ``reason`` is what the optional ``Metrics.server_switch`` hook is told:
        ``"fallback"``, ``"primary"`` (the primary serves again) or ``"retry"`` (every
        server failed; the list starts over)."""
        slot.protocol.server_changed()
        slot.protocol.config = self._config_for(slot.group[slot.server])
        metrics = self.options.metrics
        hook = getattr(metrics, "server_switch", None) if metrics is not None else None
        if hook is not None:
            _hook("server_switch", hook, previous, self._server_uri(slot), reason)

    def _config_for(self, server: int) -> ProtocolConfig:
        features = self._targets[server].server_features
        return replace(
            self._config,
            ignore_resource_deletion=self.options.ignore_resource_deletion_asked
            or "ignore_resource_deletion" in features,
            fail_on_data_errors="fail_on_data_errors" in features,
            resource_timer_is_transient_error="resource_timer_is_transient_error" in features,
        )

    def target(self, server: int) -> ServerTarget:
        """The server at index ``server``, with the channel options the driver must use."""
        return self._targets[server]

    # ------------------------------------------------------------------ slots

    def _new_protocol(self) -> SotwProtocol | DeltaProtocol:
        if self.options.protocol == "delta":
            return DeltaProtocol(self._config)
        return SotwProtocol(self._config)

    def _slot_key(self, type_url: str, group: tuple[int, ...] | None = None) -> str:
        base = type_url if self.options.per_type else ADS_SLOT
        if group is None or group == self._router.default:
            return base  # the top-level servers keep the keys they always had
        return f"{base}@{','.join(map(str, group))}"

    def _slot_for(self, type_url: str, now: float, group: tuple[int, ...] | None = None) -> _Slot:
        group = self._router.default if group is None else group
        key = self._slot_key(type_url, group)
        slot = self._slots.get(key)
        if slot is None:
            base = type_url if self.options.per_type else ADS_SLOT
            slot = _Slot(key, self._new_protocol(), self.options.backoff.state(), retry_at=now,
                         base=base, group=group)  # fmt: skip
            self._slots[key] = slot
        slot.type_urls.add(type_url)
        return slot

    def _slots_of(self, type_url: str) -> list[_Slot]:
        """Every stream that may carry ``type_url`` (one per server group)."""
        base = type_url if self.options.per_type else ADS_SLOT
        return [s for s in self._slots.values() if s.base == base]

    def _route(self, rtype: ResourceType[Any], names: frozenset[str]) -> dict[str, tuple[int, ...]]:
        """The server group of each watched name; checks new-style names (A47, TP1)."""
        groups: dict[str, tuple[int, ...]] = {}
        for name in names:
            if is_xdstp(name):
                parsed = parse_xdstp(name)
                if parsed.type_url != rtype.type_url:
                    raise ResourceNameError(
                        name, f"names type {parsed.type_url}, but the watch is of {rtype.type_url}"
                    )
                if parsed.is_glob and self.options.protocol != "delta":
                    raise ResourceNameError(
                        name, "glob collections ('.../*') need protocol='delta'"
                    )
            groups[name] = self._router.group_of(name)
        return groups

    def _method(self, rtype: ResourceType[Any]) -> str:
        opts = self.options
        delta = opts.protocol == "delta"
        if opts.transport == "grpc" and opts.ads:
            if opts.api_version == "v2":
                return V2_ADS_DELTA_METHOD if delta else V2_ADS_METHOD
            return ADS_DELTA_METHOD if delta else ADS_METHOD
        if opts.transport == "grpc":
            method = rtype.delta_method if delta else rtype.stream_method
        elif opts.transport == "grpc-fetch":
            method = rtype.fetch_method
        else:
            method = rtype.rest_path
        if method is None:
            raise UsageError(
                f"{rtype.type_url} has no {opts.protocol} service for transport "
                f"{opts.transport!r} with ads={opts.ads}; use ADS or another protocol"
            )
        return method

    def _spec(self, slot: _Slot) -> StreamSpec:
        types = tuple(slot.protocol.subscribed_types()) or tuple(sorted(slot.type_urls))
        first = resource_type(types[0]) if slot.base == ADS_SLOT else resource_type(slot.base)
        delta = self.options.protocol == "delta"
        # Only the gRPC transport reads raw_resources; the SotW core takes both forms.
        return StreamSpec(self._method(first), delta, types, raw_resources=not delta)

    def _server_uri(self, slot: _Slot) -> str:
        return self._targets[slot.group[slot.server]].uri

    # ------------------------------------------------------------------ watchers

    def add_watch(
        self,
        rtype: ResourceType[Any],
        names: frozenset[str] | None,
        buffer: EventBuffer,
        callback: Callable[[WatchEvent[Any]], object] | None,
        now: float,
    ) -> WatchEntry[Any]:
        """Register a watcher, subscribe what is new, and replay what is cached."""
        with self.lock:
            if self.closed:
                raise ClientClosedError("the client is closed; create a new one")
            if self.options.protocol == "sotw" and not rtype.sotw:
                raise UsageError(f"{rtype.type_url} exists only in delta xDS; use protocol='delta'")
            self._method(rtype)  # fail early when no service carries the type
            type_url = rtype.type_url
            if names is not None:
                # TP1: one spelling per name (sorted context parameters) on the wire and as key.
                names = frozenset(normalize_name(n) for n in names)
            groups = {} if names is None else self._route(rtype, names)
            entry: WatchEntry[Any] = WatchEntry(type_url, names, buffer, callback)
            slots = {}
            for group in {*groups.values()} if names is not None else {None}:
                slot = self._slot_for(type_url, now, group)
                slots[slot.key] = slot
            new_names, new_wildcard = self.registry.add(entry)
            try:
                if new_wildcard:
                    for protocol in self._slot_for(type_url, now).protocols():
                        protocol.subscribe(type_url, None)
                by_slot: dict[str, list[str]] = {}
                for name in new_names:
                    by_slot.setdefault(self._slot_key(type_url, groups[name]), []).append(name)
                for key, added in by_slot.items():
                    for protocol in slots[key].protocols():
                        protocol.subscribe(type_url, added)
            except Exception:
                self.registry.remove(entry)
                raise
            for slot in slots.values():
                self._restore(slot, type_url, now)
                self._replay(slot, entry)
            return entry

    def _restore(self, slot: _Slot, type_url: str, now: float) -> None:
        """Seed a stream's core with the last good config of ``type_url`` (once)."""
        cache = self._cache
        if cache is None or type_url in slot.restored_types:
            return
        slot.restored_types.add(type_url)
        record = cache.load(self._targets[slot.group[0]].uri, type_url, self.options.protocol)
        if record is None:
            return
        names, errors = slot.protocol.restore(type_url, record.version_info, record.resources, now)
        for name, why in errors.items():
            log.warning("last good config: %s %s not restored: %s", type_url, name, why)
        slot.unconfirmed.update((type_url, name) for name in names)
        if names:
            log.info("restored %d %s from the last good config", len(names), type_url)

    def _replay(self, slot: _Slot, entry: WatchEntry[Any]) -> None:
        """A new watcher sees the cached state at once: values, errors, absence."""
        protocol = slot.protocol
        cached = protocol.resources(entry.type_url)
        restored_class: type[ResourceUpdated[Any]] = ResourceUpdated
        if slot.unconfirmed:  # values read from the cache directory (its module is loaded)
            from ._persist import ResourceRestored

            restored_class = ResourceRestored
        for state in protocol.resource_states(entry.type_url):
            value = cached.get(state.name)
            aliases = value.aliases if value is not None else ()
            if not entry.wants(state.name, aliases):
                continue
            if value is not None:
                restored = (entry.type_url, value.name) in slot.unconfirmed
                event_class = restored_class if restored else ResourceUpdated
                entry.buffer.put(
                    event_class(entry.type_url, value.name, value.version, value.resource,
                                value.aliases)
                )  # fmt: skip
            if state.status == "NACKED":
                entry.buffer.put(
                    ResponseRejected(entry.type_url, "", state.failed_version or "",
                                     {state.name: state.error or ""})
                )  # fmt: skip
            elif state.status == "DOES_NOT_EXIST":
                entry.buffer.put(ResourceDoesNotExist(entry.type_url, state.name))
        if slot.reported is False:
            entry.buffer.put(
                ConnectivityChanged(False, self._server_uri(slot), tuple(sorted(slot.type_urls)))
            )

    def remove_watch(self, entry: WatchEntry[Any]) -> None:
        """Drop a watcher; the last one of a name unsubscribes it."""
        with self.lock:
            if entry.closed:
                return
            entry.closed = True
            entry.buffer.close()
            gone, wildcard_gone = self.registry.remove(entry)
            if self.closed:
                return
            by_slot: dict[str, list[str]] = {}
            for name in gone:
                group = self._router.group_of(name)  # checked when the watch began
                by_slot.setdefault(self._slot_key(entry.type_url, group), []).append(name)
            if wildcard_gone:
                by_slot.setdefault(self._slot_key(entry.type_url), [])
            for key, names in by_slot.items():
                slot = self._slots.get(key)
                if slot is None:
                    continue
                for protocol in slot.protocols():
                    if names:
                        protocol.unsubscribe(entry.type_url, names)
                    if wildcard_gone and key == self._slot_key(entry.type_url):
                        protocol.unsubscribe(entry.type_url, None)

    # ------------------------------------------------------------------ reads

    def resources(self, type_url: str) -> dict[str, CachedResource[Any]]:
        """A snapshot of the cached resources of a type."""
        with self.lock:
            merged: dict[str, CachedResource[Any]] = {}
            for slot in self._slots_of(type_url):
                merged.update(slot.protocol.resources(type_url))
            from ._html import ResourceCache  # loads with the first snapshot, not the import

            return ResourceCache(type_url, merged)  # a dict that notebooks show as a table

    def client_config(self, to_wall: Callable[[float], float]) -> ClientConfig:
        """CSDS ``ClientConfig`` of everything subscribed or cached, secrets redacted."""
        from ._csds import build_client_config  # its protos load on the first dump

        with self.lock:
            items = []
            for slot in self._slots.values():
                for state in slot.protocol.resource_states():
                    value = slot.protocol.resources(state.type_url).get(state.name)
                    items.append((state, value))
            return build_client_config(self.options.node, items, to_wall)

    def connected(self) -> dict[str, bool | None]:
        """Connectivity per stream slot, as last reported to watchers."""
        with self.lock:
            return {key: slot.reported for key, slot in self._slots.items()}

    def current_server(self, type_url: str | None = None) -> str | None:
        """URI of the server the stream of ``type_url`` (or ADS) uses now."""
        with self.lock:
            key = ADS_SLOT if type_url is None or not self.options.per_type else type_url
            slot = self._slots.get(key)
            return None if slot is None else self._server_uri(slot)

    # ------------------------------------------------------------------ driver side

    def step(self, now: float) -> list[Action]:
        """Fire timers, open due streams, and collect requests to send."""
        with self.lock:
            actions, self._pending = self._pending, []
            if self.closed:
                return actions
            for slot in self._slots.values():
                if slot.dirty and self._cache is not None:
                    actions.extend(self._save_actions(slot, self._cache))
                self._apply(slot, slot.protocol.tick(now))
                if not slot.open and slot.retry_at is not None and now >= slot.retry_at:
                    slot.opened += 1
                    slot.stream_opened(slot.opened)
                    slot.protocol.connected(now)
                    server = slot.group[slot.server]
                    actions.append(OpenStream(slot.stream_key, slot.attempt, server,
                                              self._spec(slot)))  # fmt: skip
                    log.debug("opening %s stream to %s", slot.key, self._server_uri(slot))
                if slot.open and not slot.holding:
                    for request in slot.protocol.requests_to_send():
                        # A57: its timers start once the write is confirmed (on_written).
                        slot.in_flight.append(request)
                        actions.append(SendRequest(slot.stream_key, slot.attempt, request))
                if slot.candidate is not None:
                    actions.extend(self._step_candidate(slot, slot.candidate, now))
                if (
                    slot.open and not slot.probing and now >= slot.ready_check_at
                    and self._wants_ready_check(slot)
                ):  # fmt: skip
                    # A silent stream (a resumed delta stream with nothing new, a server
                    # with nothing to say yet): the server answering a probe on the
                    # same channel is the sign, for watchers, that it is up.
                    slot.probing = True
                    slot.probe_attempt = slot.attempt
                    actions.append(ProbeServer(slot.key, slot.group[slot.server]))
            return actions

    @staticmethod
    def _wants_ready_check(slot: _Slot) -> bool:
        """Whether watchers wait to hear that the stream is up (a probe answer tells them;
        it does not start timers: only the stream itself shows that it is served)."""
        return slot.reported is not True

    def _step_candidate(self, slot: _Slot, cand: _Candidate, now: float) -> list[Action]:
        """Open the stream to the primary when its backoff allows, and feed it requests."""
        actions: list[Action] = []
        if not cand.open and cand.retry_at is not None and now >= cand.retry_at:
            slot.opened += 1
            cand.attempt = slot.opened
            cand.open = True
            cand.retry_at = None
            cand.protocol = self._candidate_protocol(slot)
            cand.protocol.connected(now)
            primary = slot.group[0]
            actions.append(OpenStream(cand.key, cand.attempt, primary, self._spec(slot)))
            log.debug("%s: trying the primary %s alongside %s",
                      slot.key, self._targets[primary].uri, self._server_uri(slot))  # fmt: skip
        if cand.open and cand.protocol is not None:
            # No request_sent: the candidate runs no timers; its core is thrown away.
            for request in cand.protocol.requests_to_send():
                actions.append(SendRequest(cand.key, cand.attempt, request))
        return actions

    def _candidate_protocol(self, slot: _Slot) -> SotwProtocol | DeltaProtocol:
        """A fresh core for the primary, subscribed to what the slot's watchers want."""
        protocol = self._new_protocol()
        protocol.config = self._config_for(slot.group[0])
        for type_url in dict.fromkeys([*slot.protocol.subscribed_types(), *sorted(slot.type_urls)]):
            names = sorted(
                n for n in self.registry.watched_names(type_url)
                if self._router.group_of(n) == slot.group
            )  # fmt: skip
            if names:
                protocol.subscribe(type_url, names)
            if self.registry.has_wildcard(type_url) and slot.key == self._slot_key(type_url):
                protocol.subscribe(type_url, None)
        return protocol

    def _start_candidate(self, slot: _Slot, now: float) -> None:
        """On a fallback: keep trying the primary's xDS stream, with the primary's backoff."""
        if slot.candidate is not None or slot.server == 0:
            return
        key = slot.key + CANDIDATE_SUFFIX if slot.stream_key == slot.key else slot.key
        backoff = self.options.backoff.state()
        slot.candidate = _Candidate(key, backoff, retry_at=now + backoff.next_delay())

    def _drop_candidate(self, slot: _Slot, now: float) -> None:
        cand, slot.candidate = slot.candidate, None
        if cand is not None and cand.open:
            self._pending.append(CloseStream(cand.key, cand.attempt))
            if cand.protocol is not None:
                cand.protocol.disconnected(now)

    def _save_actions(self, slot: _Slot, cache: ConfigCache) -> list[Action]:
        actions: list[Action] = [
            SaveConfig(cache, record) for _, record in sorted(slot.dirty.items())
        ]
        slot.dirty.clear()
        return actions

    def next_wakeup(self) -> float | None:
        """When :meth:`step` must run next (None: only on new input)."""
        with self.lock:
            times: list[float] = []
            for slot in self._slots.values():
                deadline = slot.protocol.next_deadline()
                if deadline is not None:
                    times.append(deadline)
                if not slot.open and slot.retry_at is not None:
                    times.append(slot.retry_at)
                cand = slot.candidate
                if cand is not None and not cand.open and cand.retry_at is not None:
                    times.append(cand.retry_at)
                if slot.open and not slot.probing and self._wants_ready_check(slot):
                    times.append(slot.ready_check_at)
            return min(times) if times else None

    def _stream(self, key: str, attempt: int) -> tuple[_Slot, _Candidate | None] | None:
        """The slot whose stream (or whose candidate's stream, then returned too) the
        driver knows as ``key``/``attempt``; None for a stream we already left."""
        if self.closed:
            return None
        slot = self._slots.get(key)
        if slot is None and key.endswith(CANDIDATE_SUFFIX):
            slot = self._slots.get(key[: -len(CANDIDATE_SUFFIX)])
        if slot is None:
            return None
        if slot.open and slot.stream_key == key and slot.attempt == attempt:
            return slot, None
        cand = slot.candidate
        if cand is not None and cand.open and cand.key == key and cand.attempt == attempt:
            return slot, cand
        return None  # a late message from a stream we already left

    def _current(self, key: str, attempt: int) -> _Slot | None:
        found = self._stream(key, attempt)
        return None if found is None or found[1] is not None else found[0]

    def _stream_up(self, slot: _Slot, now: float) -> None:
        """The server serves the slot's stream: start the timers of what was written."""
        slot.up = True
        held, slot.held = slot.held, []
        for request in held:
            slot.protocol.request_sent(request, now)  # type: ignore[arg-type]

    def on_served(self, key: str, attempt: int, now: float) -> bool:
        """The server shows that it serves a stream (its response headers arrived).

        Drivers of transports that cannot tell call it when the stream opens. Returns
        whether :meth:`next_wakeup` may have moved (a timer started).
        """
        with self.lock:
            slot = self._current(key, attempt)
            if slot is None or slot.up:
                return False
            before = slot.protocol.next_deadline()
            self._stream_up(slot, now)
            return slot.protocol.next_deadline() != before

    def on_written(self, key: str, attempt: int, now: float) -> bool:
        """The oldest request sent on a stream has been written on the wire.

        gRFC A57: a request's does-not-exist timers start only once it went out on a
        connected stream the server serves; until the stream is known up (see
        :meth:`on_served`), they wait. Drivers of transports that cannot tell call it
        once ``send`` returned. Returns whether :meth:`next_wakeup` may have moved.

        Called once per ACK from gRPC's side of the stream, so the common case, an
        ACK, takes no lock: the oldest entry is popped from the stream's own list
        (a list per stream attempt, replaced, never cleared, when the stream changes)
        once the stream is known current; only a request that starts timers is then
        handled under the lock.
        """
        slot = self._slots.get(key)
        if slot is None and key.endswith(CANDIDATE_SUFFIX):
            slot = self._slots.get(key[: -len(CANDIDATE_SUFFIX)])
        if slot is None:
            return False
        in_flight = slot.in_flight  # read before the checks: a newer list means a newer attempt
        if not slot.open or slot.stream_key != key or slot.attempt != attempt or self.closed:
            return False  # a candidate's stream (it runs no timers), or one already left
        try:
            request = in_flight.pop(0)
        except IndexError:
            return False
        if request is None:
            return False
        with self.lock:
            slot = self._current(key, attempt)
            if slot is None:
                return False
            if not slot.up:
                slot.held.append(request)
                return False
            before = slot.protocol.next_deadline()
            slot.protocol.request_sent(request, now)  # type: ignore[arg-type]
            return slot.protocol.next_deadline() != before

    def _promote(self, slot: _Slot, cand: _Candidate, now: float) -> None:
        """gRFC A71: the primary's stream delivered a response: it becomes the slot's
        stream and the fallback's stream closes. Watchers hear nothing of the switch."""
        fallback = self._server_uri(slot)
        if slot.open:
            self._pending.append(CloseStream(slot.stream_key, slot.attempt))
            slot.open = False
            slot.protocol.disconnected(now)
        slot.server = 0
        self._server_changed(slot, fallback, "primary")
        slot.protocol.connected(now)
        slot.stream_key = cand.key
        slot.stream_opened(cand.attempt)
        slot.candidate = None
        log.info("%s: the primary %s serves again; switching back from %s",
                 slot.key, self._server_uri(slot), fallback)  # fmt: skip

    def on_response(self, key: str, attempt: int, response: Response, now: float) -> None:
        """A response arrived on a stream (its replies go out with the next :meth:`step`)."""
        with self.lock:
            self._receive(key, attempt, response, now)

    def receive(
        self, key: str, attempt: int, response: Response, now: float, *, hold: bool = False
    ) -> Received:
        """A response arrived on a stream: apply it, deliver its events, then take its reply.

        The reader sends :attr:`Received.replies` itself (delta ACKs carry only a nonce;
        SotW replies go out with :meth:`step`, after any subscription change before them)
        and wakes the I/O worker only when :attr:`Received.wake` says so. With ``hold``
        (flow control) and events delivered, nothing is replied and the slot's requests
        wait until :meth:`release`, once the watchers in :attr:`Received.buffers` took
        their events.
        """
        with self.lock:
            slot = self._slots.get(key)
            if slot is None:
                before = None
            else:
                protocol = slot.protocol
                before = protocol.next_deadline()
                if (
                    self._short_path and type(protocol) is DeltaProtocol
                    and slot.got_response and slot.open
                    and slot.attempt == attempt and slot.stream_key == key and not self.closed
                    and len(response.resources) < LARGE_RESPONSE
                ):  # fmt: skip
                    # The steady state of a delta stream (what _receive does for it, less
                    # its first-response and candidate cases: nothing is added to _pending).
                    buffers = self._deliver(slot, protocol.receive(response, now))  # type: ignore[arg-type]
                    after = protocol.next_deadline()
                    wake = bool(slot.dirty) or (
                        after is not None and (before is None or after < before)
                    )
                    if hold and buffers:
                        slot.holding = True
                        return Received((), wake, buffers, True)
                    return Received(self._take_replies(slot), wake, (), bool(buffers))
            pending = len(self._pending)
            found = self._receive(key, attempt, response, now)
            if found is None:
                return Received((), True, ())
            slot, first, buffers = found
            after = slot.protocol.next_deadline()
            wake = (
                first or len(self._pending) != pending or bool(slot.dirty)
                or (after is not None and (before is None or after < before))
                or not isinstance(slot.protocol, DeltaProtocol)
            )  # fmt: skip
            if hold and buffers:
                slot.holding = True
                return Received((), wake, buffers, True)
            return Received(self._take_replies(slot), wake, (), bool(buffers))

    def release(self, key: str, attempt: int) -> Received:
        """Flow control: the watchers took the held response's events; its reply may go."""
        with self.lock:
            slot = self._current(key, attempt)
            if slot is None or not slot.holding:
                return Received((), True, ())
            slot.holding = False
            return Received(self._take_replies(slot), True, ())

    def _take_replies(self, slot: _Slot) -> tuple[Request, ...]:
        protocol = slot.protocol
        if not slot.open or slot.holding or not isinstance(protocol, DeltaProtocol):
            return ()
        replies = protocol.replies_to_send()
        if not replies:
            return ()
        # Confirmed by on_written, in order. A delta ACK/NACK names no resource, so it
        # starts no does-not-exist timer (A57): None holds its place.
        slot.in_flight.extend([None] * len(replies))
        return tuple(replies)

    def _receive(
        self, key: str, attempt: int, response: Response, now: float
    ) -> tuple[_Slot, bool, tuple[EventBuffer, ...]] | None:
        found = self._stream(key, attempt)
        if found is None:
            return None
        slot, cand = found
        first = cand is not None or not slot.got_response
        if cand is not None:
            self._promote(slot, cand, now)
        if not slot.got_response:
            slot.got_response = True
            slot.backoff.reset()  # gRFC A57: a stream that worked restarts at once
            self._stream_up(slot, now)
            if slot.reported is not True:
                slot.reported = True
                self._broadcast(slot, ConnectivityChanged(
                    True, self._server_uri(slot), tuple(sorted(slot.type_urls))
                ))  # fmt: skip
            log.info("%s stream to %s is up", slot.key, self._server_uri(slot))
        protocol = slot.protocol
        if len(response.resources) < LARGE_RESPONSE:
            buffers = self._apply(slot, _received(protocol, response, now))
        else:
            with collector_paused():  # many objects that outlive the apply: see _gc
                buffers = self._apply(slot, _received(protocol, response, now))
        return slot, first, buffers

    def _candidate_failed(self, slot: _Slot, cand: _Candidate, error: BaseException,
                          now: float) -> None:  # fmt: skip
        cand.open = False
        self._pending.append(CloseStream(cand.key, cand.attempt))
        if cand.protocol is not None:
            cand.protocol.disconnected(now)
        cand.protocol = None
        cand.retry_at = now + cand.backoff.next_delay()
        log.info("%s: the primary %s is not serving yet (%s); staying on %s, retry in %.2fs",
                 slot.key, self._targets[slot.group[0]].uri, error, self._server_uri(slot),
                 cand.retry_at - now)  # fmt: skip

    def on_failure(self, key: str, attempt: int, error: BaseException, now: float) -> None:
        """A stream failed or the server closed it: plan the reconnection."""
        with self.lock:
            found = self._stream(key, attempt)
            if found is None:
                return
            slot, cand = found
            if cand is not None:
                self._candidate_failed(slot, cand, error, now)
                return
            uri = self._server_uri(slot)
            slot.open = False
            slot.up = False
            slot.in_flight = []  # a new list, after ``open``: see on_written
            slot.holding = False
            slot.held.clear()
            slot.protocol.disconnected(now)
            self._pending.append(CloseStream(key, attempt))
            if (metrics := self.options.metrics) is not None:
                _hook("reconnect", metrics.reconnect, uri)
            # A poller's "stream" spans many polls: a failed poll is a real outage.
            after_response = slot.got_response and self.options.transport == "grpc"
            if slot.got_response:
                slot.retry_at = now
            elif slot.server + 1 < len(slot.group) and not slot.protocol.all_cached():
                # gRFC A71: a server that fails before any response is skipped at once,
                # but only when some watched resource has no cached value to go on with.
                slot.server += 1
                self._server_changed(slot, uri, "fallback")
                slot.retry_at = now
                log.warning("%s stream to %s failed; falling back to %s: %s",
                            key, uri, self._server_uri(slot), error)  # fmt: skip
            else:
                changed = slot.server != 0
                slot.server = 0
                if changed:
                    self._server_changed(slot, uri, "retry")
                slot.retry_at = now + slot.backoff.next_delay()
            if slot.server == 0:
                self._drop_candidate(slot, now)  # the slot's own stream tries the primary
            else:
                self._start_candidate(slot, now)
            log.info("%s stream to %s ended (%s); retry in %.2fs",
                     key, uri, error, slot.retry_at - now)  # fmt: skip
            # gRFC A57: a stream that ends after a response is no error; it restarts at
            # once and watchers hear only if the new one fails before any response.
            if slot.reported is not False and not after_response:
                slot.reported = False
                self._broadcast(
                    slot,
                    ConnectivityChanged(False, uri, tuple(sorted(slot.type_urls)), str(error)),
                )

    def on_probe(self, key: str, server: int, ok: bool, now: float) -> None:
        """Result of a :class:`ProbeServer`: whether the current server answers.

        An answer tells watchers that a silent stream is up. It starts no timer and
        never moves the client between servers: gRFC A71 counts a server as up only
        when its xDS stream delivers a response.
        """
        with self.lock:
            slot = self._slots.get(key)
            if slot is None or self.closed:
                return
            slot.probing = False
            if server != slot.group[slot.server] or slot.attempt != slot.probe_attempt:
                return  # the stream moved on meanwhile
            if not ok:
                slot.ready_check_at = now + self.options.fallback_probe_interval
                return
            if slot.open and slot.reported is not True:
                slot.reported = True
                self._broadcast(slot, ConnectivityChanged(
                    True, self._server_uri(slot), tuple(sorted(slot.type_urls))
                ))  # fmt: skip

    def close(self) -> list[Action]:
        """Stop everything: returns the streams to close; buffers end."""
        with self.lock:
            for slot in self._slots.values():
                self._drop_candidate(slot, 0.0)
            self.closed = True
            actions, self._pending = self._pending, []
            for slot in self._slots.values():
                if slot.dirty and self._cache is not None:
                    actions.extend(self._save_actions(slot, self._cache))  # accepted, not yet saved
                if slot.open:
                    actions.append(CloseStream(slot.stream_key, slot.attempt))
                    slot.open = False
                    slot.protocol.disconnected(0.0)
            for entry in self.registry.all_entries():
                entry.closed = True
                entry.buffer.close()
            return actions

    # ------------------------------------------------------------------ events

    def _entries_of(self, slot: _Slot) -> list[WatchEntry[Any]]:
        if slot.base == ADS_SLOT:
            entries = self.registry.all_entries()
        else:
            entries = self.registry.entries(slot.base)
        if len(self._slots) == 1 or not self._router.authorities:
            return entries
        # Federation: connectivity of one server group concerns only the watches using it.
        return [e for e in entries if self._uses(e, slot.group)]

    def _uses(self, entry: WatchEntry[Any], group: tuple[int, ...]) -> bool:
        if entry.names is None:
            return group == self._router.default
        return any(self._router.group_of(name) == group for name in entry.names)

    def _broadcast(self, slot: _Slot, event: ConnectivityChanged) -> None:
        for entry in self._entries_of(slot):
            entry.buffer.put(event)

    def _deliver(self, slot: _Slot, events: list[Event]) -> tuple[EventBuffer, ...]:
        """:meth:`_apply` of a delta response's events, with a short path for the common
        one: one update and its ACK, no metrics hooks, no cache directory (then the
        ``ResponseAccepted`` concerns no watcher and :meth:`_apply` only delivers the
        update). The same buffers get the same events in the same order."""
        if (
            self._short_path and len(events) == 2 and type(events[1]) is ResponseAccepted
            and type(update := events[0]) is ResourceUpdated
            and self.options.metrics is None and self._cache is None
        ):  # fmt: skip
            buffers: list[EventBuffer] = []
            for entry in self.registry.entries(update.type_url):
                if entry.names is None or entry.wants(update.name, update.aliases):
                    entry.buffer.put_many((update,))
                    buffers.append(entry.buffer)
            return tuple(buffers)
        return self._apply(slot, events)

    def _apply(self, slot: _Slot, events: Iterable[Event | UpdateBatch]) -> tuple[EventBuffer, ...]:
        """Deliver ``events`` to their watchers; returns the buffers that got some.

        An :class:`UpdateBatch` (the updates of many bare resources of one response)
        reaches each watcher as one :class:`Segment` of it: every position for a
        wildcard watch, the positions of its names otherwise.
        """
        touched: set[str] = set()
        uri = self._server_uri(slot)
        # Events are handed to each buffer in one batch (one lock, one wake-up),
        # in order; the watchers of a type are looked up once per response.
        batches: dict[int, tuple[WatchEntry[Any], list[WatchEvent[Any] | Segment]]] = {}
        watchers: dict[str, list[WatchEntry[Any]]] = {}

        def deliver(entry: WatchEntry[Any], event: WatchEvent[Any] | Segment) -> None:
            batch = batches.get(entry.id)
            if batch is None:
                batches[entry.id] = (entry, [event])
            else:
                batch[1].append(event)

        for event in events:
            if type(event) is UpdateBatch:
                type_url = event.type_url
                entries = watchers.get(type_url)
                if entries is None:
                    touched.add(type_url)
                    entries = watchers[type_url] = self.registry.entries(type_url)
                for entry in entries:
                    segment = _segment_for(entry, event)
                    if segment is not None:
                        deliver(entry, segment)
                continue
            if type(event) is ResourceUpdated:
                # The hot path (one per changed resource): no isinstance chain, no
                # call per watcher that wants everything.
                type_url = event.type_url
                entries = watchers.get(type_url)
                if entries is None:
                    touched.add(type_url)
                    entries = watchers[type_url] = self.registry.entries(type_url)
                for entry in entries:
                    if entry.names is None or entry.wants(event.name, event.aliases):
                        pending = batches.get(entry.id)
                        if pending is None:
                            batches[entry.id] = (entry, [event])
                        else:
                            pending[1].append(event)
                continue
            if isinstance(event, ResponseAccepted):
                if (metrics := self.options.metrics) is not None:
                    _hook("ack", metrics.ack, event.type_url, uri)
                    _response_hook(metrics, event.type_url, uri, True, event.control_plane)
                cache = self._cache
                if cache is not None:
                    if cache.wants(event.type_url):
                        # Taken now: a watch closing before the write must not empty it.
                        slot.dirty[event.type_url] = cache.snapshot(
                            self._targets[slot.group[0]].uri, event.type_url,
                            self.options.protocol, slot.protocol.version_info(event.type_url),
                            slot.protocol.resources(event.type_url),
                        )  # fmt: skip
                    if slot.unconfirmed:
                        slot.unconfirmed = {u for u in slot.unconfirmed if u[0] != event.type_url}
                continue
            touched.add(event.type_url)
            if isinstance(event, ResponseRejected):
                if (metrics := self.options.metrics) is not None:
                    _hook("nack", metrics.nack, event.type_url, uri)
                    _response_hook(metrics, event.type_url, uri, False, event.control_plane)
                log.warning("rejected %s version %r from %s: %s", event.type_url,
                            event.version, uri,
                            "; ".join(f"{k}: {v}" for k, v in event.errors.items()))  # fmt: skip
                for entry in self.registry.entries(event.type_url):
                    # Errors about the whole response concern every watcher of the type.
                    if entry.names is None or any(
                        entry.wants(key) or key == RESPONSE_KEY or key.startswith("resources[")
                        for key in event.errors
                    ):
                        deliver(entry, event)
                continue
            assert not isinstance(event, UpdateBatch)
            if isinstance(event, ResourceUpdated):
                aliases: tuple[str, ...] = event.aliases
            else:
                aliases = ()
            if isinstance(event, (ResourceRemoved, ResourceDoesNotExist, ResourceDeletionIgnored)):
                log.info("%s %s: %s", event.type_url, event.name, type(event).__name__)
            entries = watchers.get(event.type_url)
            if entries is None:
                entries = watchers[event.type_url] = self.registry.entries(event.type_url)
            for entry in entries:
                if entry.wants(event.name, aliases):
                    deliver(entry, event)
        for entry, batch in batches.values():
            entry.buffer.put_many(batch)
        buffers = tuple(entry.buffer for entry, _ in batches.values())
        if (metrics := self.options.metrics) is not None:
            per_authority = hasattr(metrics, "authority_resources")
            for type_url in touched:
                # Every stream of the type counts (one per server group with federation).
                states = [st for sl in self._slots_of(type_url)
                          for st in sl.protocol.resource_states(type_url)]  # fmt: skip
                _hook("resources", metrics.resources, type_url,
                      dict(Counter(st.status for st in states)))  # fmt: skip
                if per_authority:
                    by_authority: dict[str, Counter[str]] = {}
                    for st in states:
                        label = authority_label(st.name)
                        by_authority.setdefault(label, Counter())[st.status] += 1
                    hook = metrics.authority_resources  # type: ignore[attr-defined]
                    for label, counts in sorted(by_authority.items()):
                        _hook("authority_resources", hook, type_url, label, dict(counts))
        return buffers


def _received(
    protocol: SotwProtocol | DeltaProtocol, response: Response, now: float
) -> list[Event | UpdateBatch]:
    """The protocol's events for ``response``; SotW hands many updates over as a batch."""
    if isinstance(protocol, SotwProtocol):
        return protocol.receive_batched(response, now)  # type: ignore[arg-type]
    events: list[Event | UpdateBatch] = protocol.receive(response, now)  # type: ignore[arg-type,assignment]
    return events


def _segment_for(entry: WatchEntry[Any], batch: UpdateBatch) -> Segment | None:
    """What of ``batch`` the watcher ``entry`` wants (None: nothing)."""
    watched = entry.names
    if watched is None:
        return Segment(batch)
    if not entry.has_globs and len(watched) * 8 < len(batch):
        positions = batch.positions()
        index = sorted(positions[n] for n in watched if n in positions)
    else:
        wants = entry.wants
        index = [i for i, name in enumerate(batch.names) if wants(name)]
    return Segment(batch, index) if index else None


def _response_hook(
    metrics: Metrics, type_url: str, server: str, accepted: bool, control_plane: str
) -> None:
    """The optional ``Metrics.response`` hook (with the control plane identifier)."""
    hook = getattr(metrics, "response", None)
    if hook is not None:
        _hook("response", hook, type_url, server, accepted, control_plane)


def _hook(name: str, hook: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs) -> None:
    """Call one typed :class:`Metrics` method; a raising hook is logged, never fatal."""
    try:
        hook(*args, **kwargs)
    except Exception:
        log.exception("metrics hook %s raised", name)
