"""The client's decisions, made once for both drivers.

A :class:`Session` routes each watched name to a stream slot (one for ADS, or one
per type; one per server group with federation, gRFC A47), builds a protocol core
for each slot, and is the drivers' API. It does no I/O and reads no clock: a driver
(threads in ``_sync``, asyncio in ``_async``) feeds it ``now``, stream responses
and failures, and performs the :data:`Action` values it returns.

The rest lives next to it, each in one place:

- ``_lifecycle``: each stream's phase and role, the table that moves them, and the
  reconnection and fallback rules (gRFC A57, A71);
- ``_delivery``: who gets which event (one path, live or replayed), metrics, logs;
- ``_persist``: the last good config on disk (``cache_dir``).

Every method takes :attr:`Session.lock`, so user threads and the driver may call
it concurrently; one exception is the common case of :meth:`Session.on_written`
(the write of an ACK confirmed), which takes no lock: see its docstring.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any, TypeAlias, Union

from xds_client._clock import monotonic_to_wall
from xds_client._gc import LARGE_RESPONSE, collector_paused
from xds_client._prebuilt_dataclasses import dataclass
from xds_client.errors import ClientClosedError, ResourceNameError, UsageError
from xds_client.federation import is_xdstp, normalize_name, parse_xdstp
from xds_client.protocol import (
    CachedResource,
    DeltaProtocol,
    Event,
    ProtocolConfig,
    ResourceUpdated,
    ResponseAccepted,
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

from ._authorities import AuthorityRouter
from ._delivery import hook, observe, route
from ._lifecycle import Input, Phase, Role, Stream, after_failure
from ._options import ClientOptions
from ._persist import ConfigCache, LastGoodConfig, SaveConfig
from ._watchers import ConnectivityChanged, EventBuffer, WatchEntry, WatchEvent, WatchRegistry

if TYPE_CHECKING:
    from envoy.service.status.v3.csds_pb2 import ClientConfig

    from ._metrics import MetricsHooks

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

ADS_SLOT = "ads"

_LIVE = Phase.LIVE
"""Read on every response: on Python 3.11 ``Phase.LIVE`` is a lookup on the enum class."""

CANDIDATE_SUFFIX = "~primary"
"""Appended to a slot's key for the driver key of its stream to the primary (A71)."""


@dataclass(frozen=True, slots=True)
class OpenStream:
    """Open a stream for ``slot`` to server number ``server``."""

    slot: str
    attempt: int
    server: int
    spec: StreamSpec


@dataclass(frozen=True, slots=True)
class SendRequest:
    """Send ``request`` on the stream of ``slot`` (if it is still attempt ``attempt``)."""

    slot: str
    attempt: int
    request: Request


@dataclass(frozen=True, slots=True)
class CloseStream:
    """Close the stream of ``slot`` opened as attempt ``attempt``."""

    slot: str
    attempt: int


@dataclass(frozen=True, slots=True)
class ProbeServer:
    """Check whether server number ``server`` is reachable; report with ``on_probe``."""

    slot: str
    server: int


Action: TypeAlias = Union[OpenStream, SendRequest, CloseStream, ProbeServer, SaveConfig]  # noqa: UP007


@dataclass(slots=True)
class Received:
    """What the reader of a stream does after :meth:`Session.receive`."""

    replies: tuple[Request, ...]
    """ACKs/NACKs to send now, in order (delta only; SotW replies go with ``step``)."""
    wake: bool
    """The I/O worker must step: a timer moved earlier, an action is due, or SotW."""
    buffers: tuple[EventBuffer, ...]
    """Held (flow control): the buffers whose events must be taken before ``release``."""
    delivered: bool = False
    """Some watcher got events of the response (the asyncio reader lets it run first)."""


@dataclass(slots=True, eq=False, kw_only=True)
class _Slot:
    """What one stream's worth of subscriptions needs: its core, its streams, its watchers'
    view of connectivity."""

    key: str
    base: str
    """ADS, or the type URL of a per-type stream (the key without its server group)."""
    group: tuple[int, ...]
    """The servers this slot may use, in priority order, as indices of the session's
    distinct targets; ``Stream.server`` is a position in this tuple (gRFC A47)."""
    protocol: SotwProtocol | DeltaProtocol
    """The slot's core: its subscriptions and cache outlive every stream."""
    stream: Stream
    """The slot's own stream (role primary or fallback)."""
    candidate: Stream | None = None
    """While on a fallback: the stream trying the primary (gRFC A71)."""
    opened: int = 0
    """Streams opened for this slot (its own and the candidate's): the attempt numbers."""
    type_urls: set[str] = field(default_factory=set)
    reported: bool | None = None
    """Connectivity last told to watchers: None before anything was told."""
    ready_check_at: float = 0.0
    """When to check again whether the current server's channel is up."""
    probing: bool = False
    probe_attempt: int = 0
    """The stream attempt the readiness probe in flight was made for."""
    persisted: LastGoodConfig | None = None
    """With ``cache_dir``: what was read from disk and is yet to be written."""

    def cores(self) -> list[SotwProtocol | DeltaProtocol]:
        """The slot's core, and its candidate's while one is open: both subscribe."""
        candidate = self.candidate
        if candidate is None or candidate.core is None:
            return [self.protocol]
        return [self.protocol, candidate.core]


class Session:
    """Shared state and decision logic of :class:`XdsClient` and :class:`AsyncXdsClient`."""

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
        self._metrics: MetricsHooks | None = None
        if options.metrics is not None:
            from ._metrics import metrics_hooks  # loaded for a client given metrics only

            self._metrics = metrics_hooks(options.metrics)
        self._cache: ConfigCache | None = None
        if options.cache_dir is not None:
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
        """``slot``'s next stream goes to ``slot.stream.server``: nothing learnt from the old
        server is sent there, and the new one's ``server_features`` apply (A53, A88).

        ``reason`` is what the optional ``Metrics.server_switch`` hook is told:
        ``"fallback"``, ``"primary"`` (the primary serves again) or ``"retry"`` (every
        server failed; the list starts over)."""
        slot.protocol.server_changed()
        slot.protocol.config = self._config_for(slot.group[slot.stream.server])
        switch = self._metrics.server_switch if self._metrics is not None else None
        if switch is not None:
            hook("server_switch", switch, previous, self._server_uri(slot), reason)

    def _stream_opened(self, server: int) -> None:
        """The optional ``Metrics.stream_opened`` hook (gRFC A78's ``connected``)."""
        opened = self._metrics.stream_opened if self._metrics is not None else None
        if opened is not None:
            hook("stream_opened", opened, self._targets[server].uri)

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
            stream = Stream(key=key, role=Role.PRIMARY, backoff=self.options.backoff.state(),
                            retry_at=now)  # fmt: skip
            persisted = None
            if self._cache is not None:  # files are keyed by the group's primary
                persisted = LastGoodConfig(self._cache, self._targets[group[0]].uri,
                                           self.options.protocol)  # fmt: skip
            slot = _Slot(key=key, base=type_url if self.options.per_type else ADS_SLOT,
                         group=group, protocol=self._new_protocol(), stream=stream,
                         persisted=persisted)  # fmt: skip
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
        return self._targets[slot.group[slot.stream.server]].uri

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
                    for core in self._slot_for(type_url, now).cores():
                        core.subscribe(type_url, None)
                by_slot: dict[str, list[str]] = {}
                for name in new_names:
                    by_slot.setdefault(self._slot_key(type_url, groups[name]), []).append(name)
                for key, added in by_slot.items():
                    for core in slots[key].cores():
                        core.subscribe(type_url, added)
            except Exception:
                self.registry.remove(entry)
                raise
            for slot in slots.values():
                if slot.persisted is not None:
                    slot.persisted.restore(slot.protocol, type_url, now)
                self._replay(slot, entry)
            return entry

    def _replay(self, slot: _Slot, entry: WatchEntry[Any]) -> None:
        """A new watcher hears the state held now (values, errors, absence), as the
        slot's core replays it, on the one delivery path."""
        events = slot.protocol.replay(entry.type_url)
        if slot.persisted is not None:
            events = slot.persisted.mark_restored(events)
        route(events, lambda _: [entry])
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
                for core in slot.cores():
                    if names:
                        core.unsubscribe(entry.type_url, names)
                    if wildcard_gone and key == self._slot_key(entry.type_url):
                        core.unsubscribe(entry.type_url, None)

    # ------------------------------------------------------------------ reads

    def resources(self, type_url: str) -> dict[str, CachedResource[Any]]:
        """A snapshot of the cached resources of a type."""
        with self.lock:
            merged: dict[str, CachedResource[Any]] = {}
            for slot in self._slots_of(type_url):
                merged.update(slot.protocol.resources(type_url))
            from ._html import ResourceCache  # a dict that notebooks show as a table (~0.4 ms)

            return ResourceCache(type_url, merged)

    def client_config(self, to_wall: Callable[[float], float]) -> ClientConfig:
        """CSDS ``ClientConfig`` of everything subscribed or cached, secrets redacted."""
        # One of the few imports kept in a function: CSDS's protos load on the first dump.
        from ._csds import build_client_config

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
                if slot.persisted is not None and slot.persisted.dirty:
                    actions.extend(slot.persisted.saves())
                self._deliver(slot, slot.protocol.tick(now))
                stream = slot.stream
                if stream.phase is Phase.BACKOFF and _due(stream, now):
                    slot.opened += 1
                    stream.opened(slot.opened)
                    slot.protocol.connected(now)
                    server = slot.group[stream.server]
                    actions.append(OpenStream(stream.key, stream.attempt, server, self._spec(slot)))
                    log.debug("opening %s stream to %s", slot.key, self._server_uri(slot))
                    self._stream_opened(server)
                if stream.open and not stream.holding:
                    for request in slot.protocol.requests_to_send():
                        # A57: its timers start once the write is confirmed (on_written).
                        stream.in_flight.append(request)
                        actions.append(SendRequest(stream.key, stream.attempt, request))
                if slot.candidate is not None:
                    actions.extend(self._step_candidate(slot, slot.candidate, now))
                if stream.open and not slot.probing and now >= slot.ready_check_at and (
                    slot.reported is not True
                ):  # fmt: skip
                    # A silent stream (a resumed delta stream with nothing new, a server
                    # with nothing to say yet): the server answering a probe on the
                    # same channel is the sign, for watchers, that it is up. It starts
                    # no timer: timers run on the requests written on the stream.
                    slot.probing = True
                    slot.probe_attempt = stream.attempt
                    actions.append(ProbeServer(slot.key, slot.group[stream.server]))
            return actions

    def _step_candidate(self, slot: _Slot, cand: Stream, now: float) -> list[Action]:
        """Open the stream to the primary when its backoff allows, and feed it requests."""
        actions: list[Action] = []
        if cand.phase is Phase.BACKOFF and _due(cand, now):
            slot.opened += 1
            cand.opened(slot.opened)
            cand.core = self._candidate_core(slot)
            cand.core.connected(now)
            primary = slot.group[0]
            actions.append(OpenStream(cand.key, cand.attempt, primary, self._spec(slot)))
            self._stream_opened(primary)
            log.debug("%s: trying the primary %s alongside %s",
                      slot.key, self._targets[primary].uri, self._server_uri(slot))  # fmt: skip
        if cand.open and cand.core is not None:
            # Not in flight: the candidate runs no timers; its core is thrown away.
            for request in cand.core.requests_to_send():
                actions.append(SendRequest(cand.key, cand.attempt, request))
        return actions

    def _candidate_core(self, slot: _Slot) -> SotwProtocol | DeltaProtocol:
        """A fresh core for the primary, subscribed to what the slot's watchers want."""
        core = self._new_protocol()
        core.config = self._config_for(slot.group[0])
        for type_url in dict.fromkeys([*slot.protocol.subscribed_types(), *sorted(slot.type_urls)]):
            names = sorted(
                n for n in self.registry.watched_names(type_url)
                if self._router.group_of(n) == slot.group
            )  # fmt: skip
            if names:
                core.subscribe(type_url, names)
            if self.registry.has_wildcard(type_url) and slot.key == self._slot_key(type_url):
                core.subscribe(type_url, None)
        return core

    def _start_candidate(self, slot: _Slot, now: float) -> None:
        """On a fallback: keep trying the primary's xDS stream, with a backoff of its own."""
        if slot.candidate is not None:
            return
        key = slot.key + CANDIDATE_SUFFIX if slot.stream.key == slot.key else slot.key
        backoff = self.options.backoff.state()
        slot.candidate = Stream(key=key, role=Role.CANDIDATE, backoff=backoff,
                                retry_at=now + backoff.next_delay())  # fmt: skip

    def _drop_candidate(self, slot: _Slot, now: float) -> None:
        cand, slot.candidate = slot.candidate, None
        if cand is None:
            return
        if cand.open:
            self._pending.append(CloseStream(cand.key, cand.attempt))
            if cand.core is not None:
                cand.core.disconnected(now)
        cand.ended(Input.CLOSE)

    def next_wakeup(self) -> float | None:
        """When :meth:`step` must run next (None: only on new input)."""
        with self.lock:
            times: list[float] = []
            for slot in self._slots.values():
                deadline = slot.protocol.next_deadline()
                if deadline is not None:
                    times.append(deadline)
                for stream in (slot.stream, slot.candidate):
                    if stream is not None and stream.phase is Phase.BACKOFF and (
                        stream.retry_at is not None
                    ):  # fmt: skip
                        times.append(stream.retry_at)
                if slot.stream.open and not slot.probing and slot.reported is not True:
                    times.append(slot.ready_check_at)
            return min(times) if times else None

    def _slot_named(self, key: str) -> _Slot | None:
        """The slot of a driver key (a candidate's key names its slot too)."""
        slot = self._slots.get(key)
        if slot is None and key.endswith(CANDIDATE_SUFFIX):
            slot = self._slots.get(key[: -len(CANDIDATE_SUFFIX)])
        return slot

    def _stream(self, key: str, attempt: int) -> tuple[_Slot, Stream] | None:
        """The open stream the driver knows as ``key``/``attempt`` (the slot's own or its
        candidate), with its slot; None for a stream we already left."""
        slot = self._slots.get(key) or self._slot_named(key)
        if slot is None or self.closed:
            return None
        stream = slot.stream
        if stream.key == key and stream.attempt == attempt and stream.open:
            return slot, stream
        stream = slot.candidate  # type: ignore[assignment]
        if stream is not None and stream.key == key and stream.attempt == attempt and stream.open:
            return slot, stream
        return None  # a late message from a stream we already left

    def on_written(self, key: str, attempt: int, now: float) -> bool:
        """The oldest request sent on a stream has been written on the wire.

        gRFC A57: a request's does-not-exist timers start once its write completed
        (for gRPC: on a connected channel, on a stream the server's HTTP/2 admitted),
        not when it is queued, and not only once the server answers or sends its
        headers: a server may hold a request it has no answer for without a word, as
        go-control-plane does, and gRPC C-core and grpc-go start them here too.
        Drivers of transports that cannot tell call it once ``send`` returned.
        Returns whether :meth:`next_wakeup` may have moved.

        Called once per ACK from gRPC's side of the stream, so the common case, an
        ACK, takes no lock: it pops the oldest entry of the stream's ``in_flight``
        list, read *before* checking that the stream is still the one meant. Each
        attempt gets a new list (``Stream.opened``/``ended`` replace it after moving
        the phase and attempt, never clear it), so a stream that moved on meanwhile
        fails the check or leaves the pop on a list nobody reads. Only a request that
        starts timers is then handled under the lock, after checking again.
        """
        slot = self._slots.get(key) or self._slot_named(key)
        if slot is None:
            return False
        stream = slot.stream  # read once: a promotion replaces it
        in_flight = stream.in_flight  # before the checks: a newer list means a newer attempt
        if not stream.open or stream.key != key or stream.attempt != attempt or self.closed:
            return False  # a candidate's stream (it runs no timers), or one already left
        try:
            request = in_flight.pop(0)
        except IndexError:
            return False
        if request is None:
            return False
        with self.lock:
            found = self._stream(key, attempt)
            if found is None or found[1] is not slot.stream:
                return False
            before = slot.protocol.next_deadline()
            slot.protocol.request_sent(request, now)  # type: ignore[arg-type]
            return slot.protocol.next_deadline() != before

    def on_response(self, key: str, attempt: int, response: Response, now: float) -> None:
        """A response arrived on a stream (its replies go out with the next :meth:`step`)."""
        self.receive(key, attempt, response, now, reply=False)

    def receive(
        self, key: str, attempt: int, response: Response, now: float, *, hold: bool = False,
        reply: bool = True,
    ) -> Received:  # fmt: skip
        """A response arrived on a stream: apply it, deliver its events, then take its reply.

        The reader sends :attr:`Received.replies` itself (delta ACKs carry only a nonce;
        SotW replies go out with :meth:`step`, after any subscription change before them;
        without ``reply`` every reply does) and wakes the I/O worker only when
        :attr:`Received.wake` says so. With ``hold`` (flow control) and events delivered,
        nothing is replied and the slot's requests wait until :meth:`release`, once the
        watchers in :attr:`Received.buffers` took their events.
        """
        with self.lock:
            found = self._stream(key, attempt)
            if found is None:
                return Received((), True, ())
            slot, stream = found
            protocol = slot.protocol
            before = protocol.next_deadline()
            pending = len(self._pending)
            first = stream.phase is not _LIVE or stream is not slot.stream
            if first:
                self._first_response(slot, stream, now)
            # SotW hands the updates of many bare resources over as one batch.
            apply = protocol.receive_batched if type(protocol) is SotwProtocol else protocol.receive
            if len(response.resources) < LARGE_RESPONSE:
                buffers = self._deliver(slot, apply(response, now))  # type: ignore[arg-type]
            else:
                with collector_paused():  # many objects that outlive the apply: see _gc
                    buffers = self._deliver(slot, apply(response, now))  # type: ignore[arg-type]
            after = protocol.next_deadline()
            wake = (
                first or len(self._pending) != pending
                or (slot.persisted is not None and bool(slot.persisted.dirty))
                or (after is not None and (before is None or after < before))
                or type(protocol) is not DeltaProtocol
            )  # fmt: skip
            if hold and buffers:
                slot.stream.holding = True
                return Received((), wake, buffers, True)
            replies = self._take_replies(slot) if reply else ()
            return Received(replies, wake, (), bool(buffers))

    def release(self, key: str, attempt: int) -> Received:
        """Flow control: the watchers took the held response's events; its reply may go."""
        with self.lock:
            found = self._stream(key, attempt)
            if found is None or found[1] is not found[0].stream or not found[1].holding:
                return Received((), True, ())
            found[1].holding = False
            return Received(self._take_replies(found[0]), True, ())

    def _take_replies(self, slot: _Slot) -> tuple[Request, ...]:
        protocol, stream = slot.protocol, slot.stream
        if not stream.open or stream.holding or type(protocol) is not DeltaProtocol:
            return ()
        replies = protocol.replies_to_send()
        if not replies:
            return ()
        # Confirmed by on_written, in order. A delta ACK/NACK names no resource, so it
        # starts no does-not-exist timer (A57): None holds its place.
        stream.in_flight.extend([None] * len(replies))
        return tuple(replies)

    def _first_response(self, slot: _Slot, stream: Stream, now: float) -> None:
        """A stream's first response: it works, and (a candidate) it serves the slot."""
        if stream is not slot.stream:
            self._promote(slot, stream, now)
        stream.move(Input.RESPONSE)
        stream.backoff.reset()  # gRFC A57: a stream that worked restarts at once
        if slot.reported is not True:
            slot.reported = True
            self._broadcast(slot, ConnectivityChanged(
                True, self._server_uri(slot), tuple(sorted(slot.type_urls))
            ))  # fmt: skip
        log.info("%s stream to %s is up", slot.key, self._server_uri(slot))

    def _promote(self, slot: _Slot, cand: Stream, now: float) -> None:
        """gRFC A71: the primary's stream delivered a response: it becomes the slot's
        stream and the fallback's stream closes. Watchers hear nothing of the switch."""
        fallback, old = self._server_uri(slot), slot.stream
        if old.open:
            self._pending.append(CloseStream(old.key, old.attempt))
            slot.protocol.disconnected(now)
        old.ended(Input.CLOSE)
        cand.role, cand.server, cand.core = Role.PRIMARY, 0, None
        slot.stream, slot.candidate = cand, None
        self._server_changed(slot, fallback, "primary")
        slot.protocol.connected(now)
        log.info("%s: the primary %s serves again; switching back from %s",
                 slot.key, self._server_uri(slot), fallback)  # fmt: skip

    def on_failure(self, key: str, attempt: int, error: BaseException, now: float) -> None:
        """A stream failed or the server closed it: plan the reconnection."""
        with self.lock:
            found = self._stream(key, attempt)
            if found is None:
                return
            slot, stream = found
            was = stream.phase
            plan = after_failure(
                stream, was, servers=len(slot.group), all_cached=slot.protocol.all_cached(),
                polled=self.options.transport != "grpc", reported=slot.reported,
            )  # fmt: skip
            stream.ended(Input.FAILURE)
            self._pending.append(CloseStream(key, attempt))
            if stream.role is Role.CANDIDATE:
                if stream.core is not None:
                    stream.core.disconnected(now)
                stream.core = None
                stream.retry_at = now + stream.backoff.next_delay()
                log.info("%s: the primary %s is not serving yet (%s); staying on %s, "
                         "retry in %.2fs", slot.key, self._targets[slot.group[0]].uri, error,
                         self._server_uri(slot), stream.retry_at - now)  # fmt: skip
                return
            uri = self._server_uri(slot)
            slot.protocol.disconnected(now)
            if self._metrics is not None:
                hook("reconnect", self._metrics.reconnect, uri)
            if plan.switch is not None:
                stream.server = plan.server
                stream.role = Role.PRIMARY if plan.server == 0 else Role.FALLBACK
                self._server_changed(slot, uri, plan.switch)
            if plan.switch == "fallback":
                log.warning("%s stream to %s failed; falling back to %s: %s",
                            key, uri, self._server_uri(slot), error)  # fmt: skip
            stream.retry_at = now if plan.at_once else now + stream.backoff.next_delay()
            if plan.candidate:
                self._start_candidate(slot, now)
            else:
                self._drop_candidate(slot, now)  # the slot's own stream tries the primary
            log.info("%s stream to %s ended (%s); retry in %.2fs",
                     key, uri, error, stream.retry_at - now)  # fmt: skip
            if plan.report_down:
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
            stream = slot.stream
            if server != slot.group[stream.server] or stream.attempt != slot.probe_attempt:
                return  # the stream moved on meanwhile
            if not ok:
                slot.ready_check_at = now + self.options.fallback_probe_interval
                return
            if stream.open and slot.reported is not True:
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
                if slot.persisted is not None:
                    actions.extend(slot.persisted.saves())  # accepted, not yet written
                stream = slot.stream
                if stream.open:
                    actions.append(CloseStream(stream.key, stream.attempt))
                    slot.protocol.disconnected(0.0)
                stream.ended(Input.CLOSE)
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

    def _deliver(
        self, slot: _Slot, events: Sequence[Event | UpdateBatch]
    ) -> tuple[EventBuffer, ...]:
        """What a slot's core said (a response, or timers that fired): observed (logs,
        metrics, the last good config), then routed to the watchers it concerns."""
        if not events:
            return ()
        metrics, persisted = self._metrics, slot.persisted
        notable = metrics is not None  # hooks to call, or something worth a log line
        for event in events:
            kind = type(event)
            if kind is ResponseAccepted:
                if persisted is not None:
                    persisted.accepted(slot.protocol, event.type_url)
            elif kind is not ResourceUpdated:
                notable = True
        if notable:
            observe(events, lambda: self._server_uri(slot), metrics, self._states_of)
        return route(events, self.registry.entries)

    def _states_of(self, type_url: str) -> list[Any]:
        """Every stream's resource states of ``type_url`` (one per server group)."""
        return [st for slot in self._slots_of(type_url)
                for st in slot.protocol.resource_states(type_url)]  # fmt: skip


def _due(stream: Stream, now: float) -> bool:
    return stream.retry_at is not None and now >= stream.retry_at
