# Generated from xds_client/client/_async.py by tools/gen_sync.py: do not edit.
"""XdsClient: the thread driver of :class:`~xds_client.client._session.Session`.

Generated from ``_async.py`` with the thread backend: one I/O thread runs the
session (timers, opening streams, sending), one reader thread per stream applies
responses to it, and one dispatcher thread runs ``on_event`` callbacks. No asyncio
is involved, so the client also works from code inside an event loop (a notebook).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from google.protobuf.message import Message
from typing_extensions import Self, Unpack

from xds_client._backends.threads import (
    Closing,
    Dispatcher,
    Empty,
    Event,
    Inbox,
    Waiter,
    Worker,
    run_blocking,
    spawn,
)
from xds_client._clock import monotonic_to_wall
from xds_client._prebuilt_dataclasses import dataclass
from xds_client.errors import ClientClosedError, TransportError, UsageError, WaitTimeoutError
from xds_client.protocol import CachedResource
from xds_client.resources import ResourceType
from xds_client.transport import (
    ReportsWrites,
    ServerTarget,
    Stream,
    Transport,
    given_transport,
    make_transport,
)

from ._inbox import InboxItem, ProbeResult, StreamFailed
from ._options import (
    ClientArgs,
    ResourceSpec,
    ServerSpec,
    build_options,
    check_callback,
    check_option_names,
    normalize_names,
    resolve_type,
)
from ._session import (
    Action,
    CloseStream,
    OpenStream,
    ProbeServer,
    SaveConfig,
    SendRequest,
    Session,
)
from ._watchers import (
    RUNNING,
    EventBuffer,
    WatchEntry,
    WatchEvent,
    check_wait_name,
    describe_wait,
    matches,
    wait_stopper,
)

if TYPE_CHECKING:
    from envoy.service.status.v3.csds_pb2 import ClientConfig

    from xds_client.graph import ConfigWatch

__all__ = ["Watch", "XdsClient"]

M = TypeVar("M", bound=Message)
log = logging.getLogger("xds_client.client")

_JOIN_TIMEOUT = 1.0
_TAKEN_RECHECK = 0.5
"""Flow control: how often a held reader looks again (for a stop) while watchers lag."""


class Watch(Closing, Generic[M]):
    """Events about watched resources, as an iterator (``for`` over an Watch).

    Iteration ends when the watch or the client closes. Use it as a context
    manager, or call :meth:`close`, to unsubscribe. A watch created with
    ``on_event=`` delivers to the callback instead and cannot be iterated.
    """

    def __init__(
        self, client: XdsClient, entry: WatchEntry[M], rtype: ResourceType[M],
        waiter: Waiter,
    ) -> None:  # fmt: skip
        self._client = client
        self._entry = entry
        self._waiter = waiter
        self.resource_type = rtype
        """The watched type."""

    @property
    def type_url(self) -> str:
        """Type URL of the watched resources."""
        return self._entry.type_url

    @property
    def names(self) -> frozenset[str] | None:
        """Watched names; None for a wildcard watch."""
        return self._entry.names

    @property
    def pending(self) -> int:
        """Events waiting to be read."""
        return len(self._entry.buffer)

    @property
    def coalesced(self) -> int:
        """Events dropped for a newer state of the same resource (slow consumer)."""
        return self._entry.buffer.coalesced

    def __repr__(self) -> str:
        names = "*" if self.names is None else ",".join(sorted(self.names))
        state = "closed" if self._entry.closed else f"pending={self.pending}"
        return f"<{type(self).__name__} {self.type_url.rsplit('/', 1)[-1]} [{names}] {state}>"

    def __iter__(self) -> Iterator[WatchEvent[M]]:
        return self

    def __next__(self) -> WatchEvent[M]:
        try:
            return self.get()
        except ClientClosedError:
            raise StopIteration from None

    def get(self, timeout: float | None = None) -> WatchEvent[M]:
        """The next event; :class:`WaitTimeoutError` after ``timeout`` seconds.

        Raises :class:`ClientClosedError` once the watch is closed and drained.
        """
        if self._entry.callback is not None:
            raise UsageError("this watch delivers to its on_event callback; it is not iterable")
        buffer = self._entry.buffer
        event = buffer.pop()
        if event is not None:
            return event  # the common case of a busy watch: no clock read
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._waiter.clear()
            event = buffer.pop()
            if event is not None:
                return event
            if buffer.closed:
                raise ClientClosedError("the watch is closed")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WaitTimeoutError(f"no event for {self.type_url} within {timeout}s")
            self._waiter.wait(buffer, remaining)

    def close(self) -> None:
        """Stop watching; the last watcher of a name unsubscribes it."""
        self._client._session.remove_watch(self._entry)
        self._client._wake()


@dataclass(frozen=True, slots=True)
class _OpenStream:
    """A stream the driver holds: its attempt number, its reader and the reader's stop flag."""

    attempt: int
    stream: Stream
    stop: Event
    reader: Worker
    confirms_writes: bool
    """The stream reports each write that reached the wire (gRFC A57); else a request
    counts as written once ``send`` returns."""


class XdsClient:
    """A thread-based xDS client: typed watches over gRPC streams.

    ``servers`` is one ``"host:port"`` (or :class:`~xds_client.transport.ServerTarget`)
    or several, in priority order: later ones are fallbacks (gRFC A71). Use
    ``with XdsClient(...) as client``, or call ``client.close()``;
    the client starts on first use.

    Keyword options (the same for the thread and the asyncio client, typed by
    :data:`~xds_client.client.ClientArgs`): each one's default and meaning are declared
    once, by :class:`~xds_client.client.ClientOptions`, and tabled in docs/client.md;
    ``credentials`` (TLS/mTLS), ``bearer_token``, ``metadata``, ``call_credentials``,
    ``keepalive``, ``max_receive_message_size`` and ``server_features`` build each
    server's :class:`~xds_client.transport.ServerTarget`.
    """

    def __init__(
        self, servers: ServerSpec | Iterable[ServerSpec], **options: Unpack[ClientArgs]
    ) -> None:
        check_option_names(options)  # before build_options names itself in a TypeError
        one = isinstance(servers, (str, ServerTarget))
        server_list: Any = servers if one else list(servers)  # type: ignore[arg-type]
        self._options = build_options(server_list, **options)
        self._session = Session(self._options)
        given = self._options.transport_object
        self._given: Transport | None = None
        if given is not None:
            self._given = given_transport(given, owner=type(self).__name__, asynchronous=False)
        self._inbox: Inbox[InboxItem] = Inbox()
        self._dispatcher = Dispatcher()
        self._io: Worker | None = None
        self._start_lock = threading.Lock()
        self._transports: dict[int, Transport] = {}
        self._streams: dict[str, _OpenStream] = {}
        self._helpers: list[Worker] = []
        self._closed = False
        self._taken = Event()
        """Flow control: set whenever a watch buffer is drained (or closed)."""

    @classmethod
    def from_bootstrap(
        cls, path: str | os.PathLike[str] | None = None, **options: Unpack[ClientArgs]
    ) -> XdsClient:
        """A client configured by a gRPC xDS bootstrap file.

        ``path`` defaults to ``$GRPC_XDS_BOOTSTRAP``, else the JSON in
        ``$GRPC_XDS_BOOTSTRAP_CONFIG``. Keyword options override the file.
        """
        from ._bootstrap import load_bootstrap  # the bootstrap parser loads with its first use

        bootstrap = load_bootstrap(path)
        options.setdefault("node", bootstrap.node)
        options.setdefault("authorities", bootstrap.authorities)
        return cls(bootstrap.servers, **options)

    def _start(self) -> None:
        with self._start_lock:
            if self._closed:
                raise ClientClosedError("the client is closed; create a new one")
            if self._io is None:
                self._dispatcher.start(type(self).__name__)  # asyncio: in a running loop
                self._io = spawn(self._run, name="xds-client-io")
                RUNNING.add(self)  # the pytest plugin reports a test that leaves it open

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._io is not None else "new"
        return (
            f"<{type(self).__name__} {','.join(self.servers)} {self._options.protocol}"
            f"{' ads' if not self._options.per_type else ''} {state}>"
        )

    # ------------------------------------------------------------------ public API

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called: the client cannot be used again."""
        return self._closed

    @overload
    def watch(
        self,
        resource: type[M],
        names: str | Iterable[str] | None = None,
        *,
        on_event: Callable[[WatchEvent[M]], object] | None = None,
    ) -> Watch[M]: ...
    @overload
    def watch(
        self,
        resource: ResourceType[M],
        names: str | Iterable[str] | None = None,
        *,
        on_event: Callable[[WatchEvent[M]], object] | None = None,
    ) -> Watch[M]: ...
    @overload
    def watch(
        self,
        resource: str,
        names: str | Iterable[str] | None = None,
        *,
        on_event: Callable[[WatchEvent[Message]], object] | None = None,
    ) -> Watch[Message]: ...
    def watch(
        self, resource: ResourceSpec, names: str | Iterable[str] | None = None, *,
        on_event: Callable[[WatchEvent[Any]], object] | None = None,
    ) -> Watch[Any]:  # fmt: skip
        """Watch ``names`` (one, several, or None for every resource) of a type.

        The type is a message class (events are typed with it), a type URL or
        an alias such as ``"cds"``. Cached state is delivered at once.
        ``on_event`` runs on the client's dispatcher: a thread.
        """
        rtype = resolve_type(resource, self._options.api_version)
        wanted = normalize_names(names)
        check_callback(on_event)
        self._start()
        buffer = EventBuffer(self._options.queue_size)
        waiter = Waiter()
        if on_event is not None:
            dispatcher, callback = self._dispatcher, on_event
            buffer.set_wake(lambda: dispatcher.notify(buffer, callback))
        elif waiter.wants_wake:
            buffer.set_wake(waiter.wake)
        if self._options.flow_control:
            buffer.on_drained = self._taken.set
        entry = self._session.add_watch(rtype, wanted, buffer, on_event, time.monotonic())
        self._wake()
        return Watch(self, entry, rtype, waiter)

    @overload
    def resources(self, resource: type[M]) -> dict[str, CachedResource[M]]: ...
    @overload
    def resources(self, resource: ResourceType[M]) -> dict[str, CachedResource[M]]: ...
    @overload
    def resources(self, resource: str) -> dict[str, CachedResource[Message]]: ...
    def resources(self, resource: ResourceSpec) -> dict[str, CachedResource[Any]]:
        """The cache of a type: name -> :class:`CachedResource` (version, message ...)."""
        rtype = resolve_type(resource, self._options.api_version)
        return self._session.resources(rtype.type_url)

    @overload
    def wait_for(
        self,
        resource: type[M],
        name: str,
        *,
        version: str | None = None,
        predicate: Callable[[M], bool] | None = None,
        timeout: float = 10.0,
    ) -> M: ...
    @overload
    def wait_for(
        self,
        resource: ResourceType[M],
        name: str,
        *,
        version: str | None = None,
        predicate: Callable[[M], bool] | None = None,
        timeout: float = 10.0,
    ) -> M: ...
    @overload
    def wait_for(
        self,
        resource: str,
        name: str,
        *,
        version: str | None = None,
        predicate: Callable[[Message], bool] | None = None,
        timeout: float = 10.0,
    ) -> Message: ...
    def wait_for(
        self, resource: ResourceSpec, name: str, *, version: str | None = None,
        predicate: Callable[[Any], bool] | None = None, timeout: float = 10.0,
    ) -> Any:  # fmt: skip
        """Wait until ``name`` is present (at ``version``, meeting ``predicate``).

        Returns the message; raises :class:`WaitTimeoutError` after ``timeout`` seconds,
        :class:`ResourceNotFoundError` as soon as the name is known not to exist (held
        when the wait began or reported during it), and :class:`TransportError` with the
        cause when the last server refuses the connection (or is not an xDS server)
        before any response of the type.
        """
        __tracebackhide__ = True  # pytest: a failed wait points at the caller's line
        check_wait_name(name)
        deadline = time.monotonic() + timeout
        last: WatchEvent[Any] | None = None
        with self.watch(resource, name) as watch:
            while True:
                remaining = deadline - time.monotonic()
                try:
                    event = watch.get(max(0.0, remaining))
                except (WaitTimeoutError, ClientClosedError) as exc:
                    raise WaitTimeoutError(
                        describe_wait(watch.type_url, name, version, timeout, last)
                    ) from exc
                if matches(event, name, version, predicate):
                    return event.resource  # type: ignore[union-attr]
                stop = wait_stopper(
                    event,
                    name,
                    answered=bool(self.resources(watch.type_url)),
                    last_server=self.servers[-1],
                )
                if stop is not None:
                    raise stop
                last = event

    def watch_config(
        self, listener: str, *, authority: str | None = None, max_aggregate_depth: int = 16
    ) -> ConfigWatch:
        """Follow ``listener`` to its routes, clusters and endpoints (docs/graph.md).

        Yields a :class:`~xds_client.graph.ConfigSnapshot` each time the whole graph
        is complete (every dependency arrived or known missing) and changed. With
        ``authority``, only the clusters of the virtual host it selects are followed
        (gRFC A74's client behaviour); by default every virtual host's are.
        """
        from xds_client.graph import ConfigWatch  # imported on use: route protos are heavy

        return ConfigWatch(
            self, listener, authority=authority, max_aggregate_depth=max_aggregate_depth
        )

    def config_dump(self) -> ClientConfig:
        """A CSDS ``ClientConfig`` of every subscribed or cached resource, secrets redacted."""
        return self._session.client_config(monotonic_to_wall)

    @property
    def servers(self) -> tuple[str, ...]:
        """Server URIs in priority order."""
        return tuple(t.uri for t in self._options.servers)

    def current_server(self, resource: ResourceSpec | None = None) -> str | None:
        """URI of the server in use (for ``resource``'s stream in per-type mode)."""
        if resource is None:
            return self._session.current_server(None)
        type_url = resolve_type(resource, self._options.api_version).type_url
        return self._session.current_server(type_url)

    def close(self) -> None:
        """End every stream and worker (within about a second); idempotent."""
        with self._start_lock:
            if self._closed:
                return
            self._closed = True
        RUNNING.discard(self)
        io = self._io
        if io is None:
            self._session.close()
            return
        self._wake()
        io.join(_JOIN_TIMEOUT)
        self._dispatcher.stop(_JOIN_TIMEOUT)
        for helper in self._helpers:
            helper.cancel()
        for helper in self._helpers:
            helper.join(_JOIN_TIMEOUT)

    def __enter__(self) -> Self:
        self._start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()

    # ------------------------------------------------------------------ the I/O worker

    def _wake(self) -> None:
        self._inbox.put(None)

    def _run(self) -> None:
        inbox = self._inbox
        try:
            while not self._closed:
                self._perform(self._session.step(time.monotonic()))
                wake_at = self._session.next_wakeup()
                timeout = None if wake_at is None else max(0.0, wake_at - time.monotonic())
                item = inbox.get(timeout)
                while not isinstance(item, Empty):  # drain: one step for a burst of wake-ups
                    if item is not None:
                        self._handle(item)
                    item = inbox.get_nowait()
        except Exception:
            log.exception("xds client I/O worker crashed")
        finally:
            self._perform(self._session.close())
            # Stop every reader first, then join them: closing takes one wait, not one per stream.
            streams = list(self._streams.values())
            self._streams.clear()
            for held in streams:
                self._stop_reader(held)
            for held in streams:
                held.reader.join(_JOIN_TIMEOUT)
            for transport in {id(t): t for t in self._transports.values()}.values():
                try:
                    transport.close()
                except Exception:
                    log.exception("closing a transport failed")

    def _handle(self, item: StreamFailed | ProbeResult) -> None:
        now = time.monotonic()
        if isinstance(item, StreamFailed):
            self._session.on_failure(item.slot, item.attempt, item.error, now)
        else:
            self._session.on_probe(item.slot, item.server, item.ok, now)

    def _transport(self, server: int) -> Transport:
        transport = self._transports.get(server)
        if transport is None:
            if self._given is not None:
                transport = self._given  # one object serves every server
            else:
                transport = make_transport(
                    self._options.transport, self._session.target(server),
                    poll_interval=self._options.poll_interval, asynchronous=False,
                )  # fmt: skip
            self._transports[server] = transport
        return transport

    def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, SendRequest):
                held = self._streams.get(action.slot)
                if held is None or held.attempt != action.attempt:
                    continue
                try:
                    # Transports queue requests: a write that cannot complete yet (a channel
                    # still connecting) must not hold up the other streams and the timers.
                    held.stream.send(action.request)
                except TransportError as exc:
                    self._inbox.put(StreamFailed(action.slot, action.attempt, exc))
                    continue
                if not held.confirms_writes:
                    self._session.on_written(action.slot, action.attempt, time.monotonic())
            elif isinstance(action, OpenStream):
                self._open(action)
            elif isinstance(action, CloseStream):
                held = self._streams.get(action.slot)
                if held is not None and held.attempt == action.attempt:
                    self._drop_stream(action.slot)
            elif isinstance(action, ProbeServer):
                self._probe(action)
            elif isinstance(action, SaveConfig):
                # Off the loop on asyncio (10,000 resources: ~0.3 s); in order either way.
                run_blocking(action.write)

    def _open(self, action: OpenStream) -> None:
        self._drop_stream(action.slot)
        try:
            stream = self._transport(action.server).open(action.spec)
        except Exception as exc:
            self._inbox.put(StreamFailed(action.slot, action.attempt, exc))
            return
        stop = Event()
        # gRFC A57: gRPC streams tell when each write completed, and a request's timers
        # start then. Other transports: once ``send`` returned.
        session, slot, attempt = self._session, action.slot, action.attempt

        def written() -> None:  # from gRPC's side of the stream; the session is thread-safe
            if session.on_written(slot, attempt, time.monotonic()):
                self._wake()  # a timer started: the I/O worker must wake for it

        confirms = False
        if isinstance(stream, ReportsWrites):
            stream.notify_written(written)
            confirms = True
        reader = spawn(
            self._read, action.slot, action.attempt, stream, stop, confirms,
            name=f"xds-client-read {action.slot}",
        )  # fmt: skip
        self._streams[action.slot] = _OpenStream(
            action.attempt, stream, stop, reader, confirms_writes=confirms
        )

    def _stop_reader(self, held: _OpenStream) -> None:
        held.stop.set()
        held.reader.cancel()  # a task ends at once; a thread when the closed stream wakes it
        try:
            held.stream.close()
        except Exception:
            log.exception("closing a stream failed")

    def _drop_stream(self, key: str) -> None:
        held = self._streams.pop(key, None)
        if held is not None:
            self._stop_reader(held)
            held.reader.join(_JOIN_TIMEOUT)

    def _read(self, key: str, attempt: int, stream: Stream, stop: Event, confirms: bool) -> None:
        session, hold = self._session, self._options.flow_control
        while not stop.is_set():
            try:
                response = stream.recv(None)  # closing the stream wakes it
            except Exception as exc:
                if not stop.is_set():
                    self._inbox.put(StreamFailed(key, attempt, exc))
                return
            if response is None:
                continue
            # Applied, delivered and ACKed here (the session is thread-safe): watchers
            # get the update with no hand-off, and the I/O worker wakes only when it
            # has something to do (a timer moved, a stream to close, a SotW reply).
            try:
                got = session.receive(key, attempt, response, time.monotonic(), hold=hold)
                if got.buffers:
                    self._wait_taken(got.buffers, stop)
                    got = session.release(key, attempt)
            except Exception:
                log.exception("applying a response failed")
                self._wake()
                continue
            for request in got.replies:
                try:
                    stream.send(request)
                except TransportError as exc:
                    self._inbox.put(StreamFailed(key, attempt, exc))
                    return
                if not confirms:
                    session.on_written(key, attempt, time.monotonic())
            if got.wake:
                self._wake()

    def _wait_taken(self, buffers: tuple[EventBuffer, ...], stop: Event) -> None:
        """Flow control: wait until each buffer fed by the last response is drained."""
        taken = self._taken
        while not stop.is_set() and not self._closed:
            taken.clear()
            if all(buffer.closed or not len(buffer) for buffer in buffers):
                return
            taken.wait(_TAKEN_RECHECK)

    def _probe(self, action: ProbeServer) -> None:
        transport = self._transport(action.server)
        timeout = min(1.0, self._options.fallback_probe_interval)
        self._helpers = [h for h in self._helpers if not h.done()]
        helper = spawn(self._run_probe, action, transport, timeout, name="xds-client-probe")
        self._helpers.append(helper)

    def _run_probe(self, action: ProbeServer, transport: Transport, timeout: float) -> None:
        ok = False
        if not self._closed:  # a probe started while closing would only delay it
            try:
                ok = bool(transport.probe(timeout))
            except Exception:
                ok = False
        self._inbox.put(ProbeResult(action.slot, action.server, ok))
