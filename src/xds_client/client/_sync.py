"""XdsClient: the thread driver of :class:`~xds_client.client._session.Session`.

One I/O thread runs the session (timers, opening streams, sending), one reader
thread per stream feeds responses to it, and one dispatcher thread runs
``on_event`` callbacks. No asyncio is involved, so the client also works from
code that runs inside an event loop (a notebook).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from google.protobuf.message import Message
from typing_extensions import Self, Unpack

from xds_client.errors import ClientClosedError, TransportError, UsageError, WaitTimeoutError
from xds_client.protocol import CachedResource
from xds_client.resources import ResourceType
from xds_client.transport import ServerTarget, Stream, Transport, make_transport

from ._bootstrap import load_bootstrap
from ._options import (
    ClientArgs,
    ResourceSpec,
    ServerSpec,
    build_options,
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
from ._watchers import EventBuffer, WatchEntry, WatchEvent, describe_wait, matches

if TYPE_CHECKING:
    from envoy.service.status.v3.csds_pb2 import ClientConfig

    from xds_client.graph import ConfigWatch

__all__ = ["Watch", "XdsClient"]

M = TypeVar("M", bound=Message)
log = logging.getLogger("xds_client.client")

_JOIN_TIMEOUT = 1.0


class Watch(Generic[M]):
    """Events about watched resources, as a blocking iterator.

    Iteration ends when the watch or the client closes. Use it as a context
    manager, or call :meth:`close`, to unsubscribe. A watch created with
    ``on_event=`` delivers to the callback instead and cannot be iterated.
    """

    def __init__(self, client: XdsClient, entry: WatchEntry[M], rtype: ResourceType[M]) -> None:
        self._client = client
        self._entry = entry
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

    def __iter__(self) -> Iterator[WatchEvent[M]]:
        return self

    def __next__(self) -> WatchEvent[M]:
        if self._entry.callback is not None:
            raise UsageError("this watch delivers to its on_event callback; it is not iterable")
        buffer = self._entry.buffer
        while True:
            event = buffer.pop()
            if event is not None:
                return event
            if buffer.closed:
                raise StopIteration
            buffer.wait(None)

    def get(self, timeout: float | None = None) -> WatchEvent[M]:
        """The next event; :class:`WaitTimeoutError` after ``timeout`` seconds.

        Raises :class:`ClientClosedError` once the watch is closed and drained.
        """
        if self._entry.callback is not None:
            raise UsageError("this watch delivers to its on_event callback")
        buffer = self._entry.buffer
        event = buffer.pop()
        if event is not None:
            return event  # the common case of a busy watch: no clock read
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            event = buffer.pop()
            if event is not None:
                return event
            if buffer.closed:
                raise ClientClosedError("the watch is closed")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WaitTimeoutError(f"no event for {self.type_url} within {timeout}s")
            buffer.wait(remaining)

    def close(self) -> None:
        """Stop watching; the last watcher of a name unsubscribes it."""
        self._client._session.remove_watch(self._entry)
        self._client._wake()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()


class _Dispatcher:
    """Runs ``on_event`` callbacks on one thread; a raising callback is logged only."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ready: deque[tuple[EventBuffer, Callable[[Any], object]]] = deque()
        self._queued: set[int] = set()
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="xds-client-dispatch", daemon=True)
        self.thread.start()

    def notify(self, buffer: EventBuffer, callback: Callable[[Any], object]) -> None:
        with self._cond:
            if id(buffer) not in self._queued:
                self._queued.add(id(buffer))
                self._ready.append((buffer, callback))
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._ready) or self._stop)
                if self._stop:
                    return
                buffer, callback = self._ready.popleft()
                self._queued.discard(id(buffer))
            while (event := buffer.pop()) is not None:
                try:
                    callback(event)
                except Exception:
                    log.exception("on_event callback raised; the watch goes on")

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if threading.current_thread() is not self.thread:
            self.thread.join(_JOIN_TIMEOUT)


class XdsClient:
    """A thread-based xDS client: typed watches over gRPC streams.

    ``servers`` is one ``"host:port"`` (or :class:`~xds_client.transport.ServerTarget`)
    or several, in priority order: later ones are fallbacks (gRFC A71).

    Keyword options (shared with :class:`AsyncXdsClient`): ``node``,
    ``protocol="sotw" | "delta"``, ``ads=True`` (False: one stream per type),
    ``api_version="v3" | "v2"``, ``transport="grpc" | "grpc-fetch" | "rest"``,
    ``poll_interval``, ``credentials`` (TLS/mTLS), ``bearer_token``, ``metadata``,
    ``call_credentials``, ``keepalive``, ``max_receive_message_size`` (256 MiB),
    ``backoff`` (:class:`Backoff`), ``does_not_exist_timeout`` (15 s),
    ``ignore_resource_deletion``, ``node_in_every_request``,
    ``reject_whole_response``, ``validators`` (type -> callable that raises to
    NACK), ``queue_size`` (per watch, before coalescing), ``metrics``
    (:class:`Metrics`), ``fallback_probe_interval``, ``lazy_decode`` (cache only the
    bytes and decode on access of ``CachedResource.resource``: less memory).
    """

    def __init__(
        self, servers: ServerSpec | Iterable[ServerSpec], **options: Unpack[ClientArgs]
    ) -> None:
        one = isinstance(servers, (str, ServerTarget))
        server_list: Any = servers if one else list(servers)  # type: ignore[arg-type]
        self._options = build_options(server_list, **options)
        self._session = Session(self._options)
        self._inbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._transports: dict[int, Transport] = {}
        self._streams: dict[str, tuple[int, Stream, threading.Event, threading.Thread]] = {}
        self._helpers: list[threading.Thread] = []
        self._closing = threading.Event()
        self._closed = False
        self._dispatcher = _Dispatcher()
        self._io = threading.Thread(target=self._run, name="xds-client-io", daemon=True)
        self._io.start()

    @classmethod
    def from_bootstrap(
        cls, path: str | os.PathLike[str] | None = None, **options: Unpack[ClientArgs]
    ) -> XdsClient:
        """A client configured by a gRPC xDS bootstrap file.

        ``path`` defaults to ``$GRPC_XDS_BOOTSTRAP``, else the JSON in
        ``$GRPC_XDS_BOOTSTRAP_CONFIG``. Keyword options override the file.
        """
        bootstrap = load_bootstrap(path)
        options.setdefault("node", bootstrap.node)
        options.setdefault("authorities", bootstrap.authorities)
        return cls(bootstrap.servers, **options)

    # ------------------------------------------------------------------ public API

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
        """
        rtype = resolve_type(resource, self._options.api_version)
        wanted = normalize_names(names)
        buffer = EventBuffer(self._options.queue_size)
        if on_event is not None:
            dispatcher, callback = self._dispatcher, on_event
            buffer.set_wake(lambda: dispatcher.notify(buffer, callback))
        entry = self._session.add_watch(rtype, wanted, buffer, on_event, time.monotonic())
        self._wake()
        return Watch(self, entry, rtype)

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
        """Block until ``name`` is present (at ``version``, meeting ``predicate``).

        Returns the message; raises :class:`WaitTimeoutError` after ``timeout`` seconds.
        """
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
        return self._session.client_config(_to_wall)

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
        """End every stream and thread (within about a second); idempotent."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._wake()
        if threading.current_thread() is not self._io:
            self._io.join(_JOIN_TIMEOUT)
        self._dispatcher.stop()
        for helper in self._helpers:
            helper.join(_JOIN_TIMEOUT)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()

    # ------------------------------------------------------------------ the I/O thread

    def _wake(self) -> None:
        self._inbox.put(None)

    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                self._perform(self._session.step(time.monotonic()))
                wake_at = self._session.next_wakeup()
                timeout = None if wake_at is None else max(0.0, wake_at - time.monotonic())
                try:
                    item = self._inbox.get(timeout=timeout)
                except queue.Empty:
                    continue
                while item is not None or not self._inbox.empty():
                    if item is not None:
                        self._handle(item)
                    try:
                        item = self._inbox.get_nowait()
                    except queue.Empty:
                        break
        except Exception:
            log.exception("xds client I/O thread crashed")
        finally:
            self._perform(self._session.close())
            # Stop every reader first, then join them: closing takes one poll, not one per stream.
            streams = list(self._streams.values())
            self._streams.clear()
            for _, stream, stop, _ in streams:
                stop.set()
                try:
                    stream.close()
                except Exception:
                    log.exception("closing a stream failed")
            for _, _, _, reader in streams:
                reader.join(_JOIN_TIMEOUT)
            for transport in self._transports.values():
                try:
                    transport.close()
                except Exception:
                    log.exception("closing a transport failed")

    def _handle(self, item: tuple[Any, ...]) -> None:
        kind, key, number, payload = item
        now = time.monotonic()
        if kind == "response":
            self._session.on_response(key, number, payload, now)
        elif kind == "failure":
            self._session.on_failure(key, number, payload, now)
        else:
            self._session.on_probe(key, number, payload, now)

    def _transport(self, server: int) -> Transport:
        transport = self._transports.get(server)
        if transport is None:
            transport = make_transport(
                self._options.transport, self._session.target(server),
                poll_interval=self._options.poll_interval, asynchronous=False,
            )  # fmt: skip
            self._transports[server] = transport
        return transport

    def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, SendRequest):
                current = self._streams.get(action.slot)
                if current is None or current[0] != action.attempt:
                    continue
                try:
                    current[1].send(action.request)
                except TransportError as exc:
                    self._inbox.put(("failure", action.slot, action.attempt, exc))
            elif isinstance(action, OpenStream):
                self._open(action)
            elif isinstance(action, CloseStream):
                current = self._streams.get(action.slot)
                if current is not None and current[0] == action.attempt:
                    self._drop_stream(action.slot)
            elif isinstance(action, ProbeServer):
                self._probe(action)
            elif isinstance(action, SaveConfig):
                action.write()  # atomic; errors are logged; ~0.3 s for 10,000 resources

    def _open(self, action: OpenStream) -> None:
        self._drop_stream(action.slot)
        try:
            stream = self._transport(action.server).open(action.spec)
        except Exception as exc:
            self._inbox.put(("failure", action.slot, action.attempt, exc))
            return
        stop = threading.Event()
        reader = threading.Thread(
            target=self._read, args=(action.slot, action.attempt, stream, stop),
            name=f"xds-client-read {action.slot}", daemon=True,
        )  # fmt: skip
        self._streams[action.slot] = (action.attempt, stream, stop, reader)
        reader.start()

    def _drop_stream(self, key: str) -> None:
        current = self._streams.pop(key, None)
        if current is None:
            return
        _, stream, stop, reader = current
        stop.set()
        try:
            stream.close()
        except Exception:
            log.exception("closing a stream failed")
        reader.join(_JOIN_TIMEOUT)

    def _read(self, key: str, attempt: int, stream: Stream, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                response = stream.recv(None)  # closing the stream wakes it
            except Exception as exc:
                if not stop.is_set():
                    self._inbox.put(("failure", key, attempt, exc))
                return
            if response is not None:
                # Applied here (the session is thread-safe): watchers get the update one
                # thread hop sooner, and the I/O thread only has to send the ACK.
                try:
                    self._session.on_response(key, attempt, response, time.monotonic())
                except Exception:
                    log.exception("applying a response failed")
                self._wake()

    def _probe(self, action: ProbeServer) -> None:
        transport = self._transport(action.server)
        probe = getattr(transport, "probe", None)
        if probe is None:
            return  # no way to tell: stay on the fallback until it fails
        timeout = min(1.0, self._options.fallback_probe_interval)
        closing = self._closing

        def run() -> None:
            ok = False
            if not closing.is_set():
                try:
                    ok = bool(probe(timeout))
                except Exception:
                    ok = False
            self._inbox.put(("probe", action.slot, action.server, ok))

        self._helpers = [h for h in self._helpers if h.is_alive()]
        helper = threading.Thread(target=run, name="xds-client-probe", daemon=True)
        self._helpers.append(helper)
        helper.start()


def _to_wall(monotonic: float) -> float:
    return time.time() - (time.monotonic() - monotonic)
