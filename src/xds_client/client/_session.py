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
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias, Union

from envoy.service.status.v3.csds_pb2 import ClientConfig
from typing_extensions import ParamSpec

from xds_client.errors import ClientClosedError, UsageError
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

from ._csds import build_client_config
from ._options import BackoffState, ClientOptions
from ._watchers import ConnectivityChanged, EventBuffer, WatchEntry, WatchEvent, WatchRegistry

__all__ = [
    "Action",
    "CloseStream",
    "OpenStream",
    "ProbeServer",
    "SendRequest",
    "Session",
]

log = logging.getLogger("xds_client.client")
_P = ParamSpec("_P")

ADS_SLOT = "ads"


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


Action: TypeAlias = Union[OpenStream, SendRequest, CloseStream, ProbeServer]  # noqa: UP007


@dataclass(eq=False)
class _Slot:
    """One stream's worth of state: ADS has one slot, per-type mode one per type."""

    key: str
    protocol: SotwProtocol | DeltaProtocol
    backoff: BackoffState
    server: int = 0
    attempt: int = 0
    open: bool = False
    got_response: bool = False
    retry_at: float | None = None
    probe_at: float | None = None
    """When to check whether the primary is back (while on a fallback server)."""
    ready_check_at: float = 0.0
    """When to check again whether the current server's channel is up."""
    probing: bool = False
    probe_for_primary: bool = False
    """What the probe in flight checks: the primary's return, or the current stream."""
    reported: bool | None = None
    """Connectivity last told to watchers: None before anything was told."""
    type_urls: set[str] = field(default_factory=set)


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
            validators=dict(options.validators),
            lazy_decode=options.lazy_decode,
        )
        self._targets = tuple(self._with_backoff(t) for t in options.servers)

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
            ("grpc.min_reconnect_backoff_ms", initial_ms),
            ("grpc.max_reconnect_backoff_ms", max(initial_ms, int(policy.maximum * 1000))),
        )
        return replace(target, channel_options=extra + target.channel_options)

    def target(self, server: int) -> ServerTarget:
        """The server at index ``server``, with the channel options the driver must use."""
        return self._targets[server]

    # ------------------------------------------------------------------ slots

    def _new_protocol(self) -> SotwProtocol | DeltaProtocol:
        if self.options.protocol == "delta":
            return DeltaProtocol(self._config)
        return SotwProtocol(self._config)

    def _slot_for(self, type_url: str, now: float) -> _Slot:
        key = type_url if self.options.per_type else ADS_SLOT
        slot = self._slots.get(key)
        if slot is None:
            slot = _Slot(key, self._new_protocol(), self.options.backoff.state(), retry_at=now)
            self._slots[key] = slot
        slot.type_urls.add(type_url)
        return slot

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
        first = resource_type(types[0]) if slot.key == ADS_SLOT else resource_type(slot.key)
        delta = self.options.protocol == "delta"
        # Only the gRPC transport reads raw_resources; the SotW core takes both forms.
        return StreamSpec(self._method(first), delta, types, raw_resources=not delta)

    def _server_uri(self, slot: _Slot) -> str:
        return self._targets[slot.server].uri

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
            entry: WatchEntry[Any] = WatchEntry(type_url, names, buffer, callback)
            slot = self._slot_for(type_url, now)
            new_names, new_wildcard = self.registry.add(entry)
            try:
                if new_wildcard:
                    slot.protocol.subscribe(type_url, None)
                if new_names:
                    slot.protocol.subscribe(type_url, new_names)
            except Exception:
                self.registry.remove(entry)
                raise
            self._replay(slot, entry)
            return entry

    def _replay(self, slot: _Slot, entry: WatchEntry[Any]) -> None:
        """A new watcher sees the cached state at once: values, errors, absence."""
        protocol = slot.protocol
        cached = protocol.resources(entry.type_url)
        for state in protocol.resource_states(entry.type_url):
            value = cached.get(state.name)
            aliases = value.aliases if value is not None else ()
            if not entry.wants(state.name, aliases):
                continue
            if value is not None:
                entry.buffer.put(
                    ResourceUpdated(entry.type_url, value.name, value.version, value.resource,
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
            key = entry.type_url if self.options.per_type else ADS_SLOT
            slot = self._slots.get(key)
            if slot is None or self.closed:
                return
            if gone:
                slot.protocol.unsubscribe(entry.type_url, gone)
            if wildcard_gone:
                slot.protocol.unsubscribe(entry.type_url, None)

    # ------------------------------------------------------------------ reads

    def resources(self, type_url: str) -> dict[str, CachedResource[Any]]:
        """A snapshot of the cached resources of a type."""
        with self.lock:
            key = type_url if self.options.per_type else ADS_SLOT
            slot = self._slots.get(key)
            return {} if slot is None else dict(slot.protocol.resources(type_url))

    def client_config(self, to_wall: Callable[[float], float]) -> ClientConfig:
        """CSDS ``ClientConfig`` of everything subscribed or cached, secrets redacted."""
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
                self._apply(slot, slot.protocol.tick(now))
                if not slot.open and slot.retry_at is not None and now >= slot.retry_at:
                    slot.attempt += 1
                    slot.open = True
                    slot.got_response = False
                    slot.retry_at = None
                    slot.protocol.connected(now)
                    actions.append(OpenStream(slot.key, slot.attempt, slot.server,
                                              self._spec(slot)))  # fmt: skip
                    log.debug("opening %s stream to %s", slot.key, self._server_uri(slot))
                if slot.open:
                    for request in slot.protocol.requests_to_send():
                        slot.protocol.request_sent(request, now)  # type: ignore[arg-type]
                        actions.append(SendRequest(slot.key, slot.attempt, request))
                if slot.open and not slot.probing:
                    if slot.reported is not True and now >= slot.ready_check_at:
                        # A resumed delta stream may stay silent when nothing changed: the
                        # server answering a probe is then the sign that the stream is up.
                        slot.probing = True
                        slot.probe_for_primary = False
                        actions.append(ProbeServer(slot.key, slot.server))
                    elif slot.probe_at is not None and now >= slot.probe_at:
                        slot.probe_at = None
                        slot.probing = True
                        slot.probe_for_primary = True
                        actions.append(ProbeServer(slot.key, 0))
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
                if slot.open and not slot.probing:
                    if slot.reported is not True:
                        times.append(slot.ready_check_at)
                    elif slot.probe_at is not None:
                        times.append(slot.probe_at)
            return min(times) if times else None

    def _current(self, key: str, attempt: int) -> _Slot | None:
        slot = self._slots.get(key)
        if slot is None or self.closed or not slot.open or slot.attempt != attempt:
            return None  # a late message from a stream we already left
        return slot

    def on_response(self, key: str, attempt: int, response: Response, now: float) -> None:
        """A response arrived on a stream."""
        with self.lock:
            slot = self._current(key, attempt)
            if slot is None:
                return
            if not slot.got_response:
                slot.got_response = True
                slot.backoff.reset()  # gRFC A57: a stream that worked restarts at once
                if slot.server > 0 and len(self._targets) > 1:
                    slot.probe_at = now + self.options.fallback_probe_interval
                if slot.reported is not True:
                    slot.reported = True
                    self._broadcast(slot, ConnectivityChanged(
                        True, self._server_uri(slot), tuple(sorted(slot.type_urls))
                    ))  # fmt: skip
                log.info("%s stream to %s is up", slot.key, self._server_uri(slot))
            self._apply(slot, slot.protocol.receive(response, now))  # type: ignore[arg-type]

    def on_failure(self, key: str, attempt: int, error: BaseException, now: float) -> None:
        """A stream failed or the server closed it: plan the reconnection."""
        with self.lock:
            slot = self._current(key, attempt)
            if slot is None:
                return
            uri = self._server_uri(slot)
            slot.open = False
            slot.protocol.disconnected(now)
            self._pending.append(CloseStream(key, attempt))
            if (metrics := self.options.metrics) is not None:
                _hook("reconnect", metrics.reconnect, uri)
            if slot.got_response:
                slot.retry_at = now
            elif slot.server + 1 < len(self._targets):
                # gRFC A71: a server that fails before any response is skipped at once.
                slot.server += 1
                slot.retry_at = now
                log.warning("%s stream to %s failed; falling back to %s: %s",
                            key, uri, self._server_uri(slot), error)  # fmt: skip
            else:
                slot.server = 0
                slot.retry_at = now + slot.backoff.next_delay()
            slot.probe_at = None
            log.info("%s stream to %s ended (%s); retry in %.2fs",
                     key, uri, error, slot.retry_at - now)  # fmt: skip
            if slot.reported is not False:
                slot.reported = False
                self._broadcast(
                    slot,
                    ConnectivityChanged(False, uri, tuple(sorted(slot.type_urls)), str(error)),
                )

    def on_probe(self, key: str, server: int, ok: bool, now: float) -> None:
        """Result of a :class:`ProbeServer`.

        For the current server: it answers, so the stream is up. For the
        primary while on a fallback: a reachable primary takes over again.
        """
        with self.lock:
            slot = self._slots.get(key)
            if slot is None or self.closed:
                return
            slot.probing = False
            if not slot.probe_for_primary:
                if server != slot.server:
                    return  # the stream moved on meanwhile
                if ok and slot.open and slot.reported is not True:
                    slot.reported = True
                    self._broadcast(slot, ConnectivityChanged(
                        True, self._server_uri(slot), tuple(sorted(slot.type_urls))
                    ))  # fmt: skip
                elif not ok:
                    slot.ready_check_at = now + self.options.fallback_probe_interval
                return
            if slot.server == server:
                return  # already back on it
            if not ok:
                slot.probe_at = now + self.options.fallback_probe_interval
                return
            log.info("%s: primary %s is reachable again; switching back",
                     key, self._targets[server].uri)  # fmt: skip
            if slot.open:
                self._pending.append(CloseStream(key, slot.attempt))
                slot.open = False
                slot.protocol.disconnected(now)
            slot.server = server
            slot.retry_at = now
            slot.probe_at = None
            slot.backoff.reset()
            slot.reported = None  # tell watchers once the primary answers

    def close(self) -> list[Action]:
        """Stop everything: returns the streams to close; buffers end."""
        with self.lock:
            self.closed = True
            actions, self._pending = self._pending, []
            for slot in self._slots.values():
                if slot.open:
                    actions.append(CloseStream(slot.key, slot.attempt))
                    slot.open = False
                    slot.protocol.disconnected(0.0)
            for entry in self.registry.all_entries():
                entry.closed = True
                entry.buffer.close()
            return actions

    # ------------------------------------------------------------------ events

    def _entries_of(self, slot: _Slot) -> list[WatchEntry[Any]]:
        if slot.key == ADS_SLOT:
            return self.registry.all_entries()
        return self.registry.entries(slot.key)

    def _broadcast(self, slot: _Slot, event: ConnectivityChanged) -> None:
        for entry in self._entries_of(slot):
            entry.buffer.put(event)

    def _apply(self, slot: _Slot, events: Iterable[Event]) -> None:
        touched: set[str] = set()
        uri = self._server_uri(slot)
        # Events are handed to each buffer in one batch (one lock, one wake-up),
        # in order; the watchers of a type are looked up once per response.
        batches: dict[int, tuple[WatchEntry[Any], list[WatchEvent[Any]]]] = {}
        watchers: dict[str, list[WatchEntry[Any]]] = {}

        def deliver(entry: WatchEntry[Any], event: WatchEvent[Any]) -> None:
            batch = batches.get(entry.id)
            if batch is None:
                batches[entry.id] = (entry, [event])
            else:
                batch[1].append(event)

        for event in events:
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
                continue
            touched.add(event.type_url)
            if isinstance(event, ResponseRejected):
                if (metrics := self.options.metrics) is not None:
                    _hook("nack", metrics.nack, event.type_url, uri)
                log.warning("rejected %s version %r from %s: %s", event.type_url,
                            event.version, uri, "; ".join(event.errors.values()))  # fmt: skip
                for entry in self.registry.entries(event.type_url):
                    # Errors about the whole response concern every watcher of the type.
                    if entry.names is None or any(
                        entry.wants(key) or key == RESPONSE_KEY or key.startswith("resources[")
                        for key in event.errors
                    ):
                        deliver(entry, event)
                continue
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
        if (metrics := self.options.metrics) is not None:
            for type_url in touched:
                counts: Counter[str] = Counter(
                    s.status for s in slot.protocol.resource_states(type_url)
                )
                _hook("resources", metrics.resources, type_url, dict(counts))


def _hook(name: str, hook: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs) -> None:
    """Call one typed :class:`Metrics` method; a raising hook is logged, never fatal."""
    try:
        hook(*args, **kwargs)
    except Exception:
        log.exception("metrics hook %s raised", name)
