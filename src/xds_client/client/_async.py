"""AsyncXdsClient: the asyncio driver of :class:`~xds_client.client._session.Session`.

The same session as :class:`XdsClient` makes every decision; this module only
replaces threads with tasks: one I/O task runs the session, one reader task
per stream feeds it, and callbacks run on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from google.protobuf.message import Message
from typing_extensions import Self, Unpack

from xds_client.errors import ClientClosedError, TransportError, UsageError, WaitTimeoutError
from xds_client.protocol import CachedResource
from xds_client.resources import ResourceType
from xds_client.transport import AsyncStream, AsyncTransport, ServerTarget, make_transport

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

    from xds_client.graph import AsyncConfigWatch

__all__ = ["AsyncWatch", "AsyncXdsClient"]

M = TypeVar("M", bound=Message)
log = logging.getLogger("xds_client.client")

_CLOSE_TIMEOUT = 1.0


class AsyncWatch(Generic[M]):
    """Events about watched resources, as an async iterator.

    Iteration ends when the watch or the client closes. Use ``async with`` (or
    ``with``), or call :meth:`close`, to unsubscribe.
    """

    def __init__(
        self, client: AsyncXdsClient, entry: WatchEntry[M], rtype: ResourceType[M],
        ready: asyncio.Event,
    ) -> None:  # fmt: skip
        self._client = client
        self._entry = entry
        self._ready = ready
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

    def __aiter__(self) -> AsyncIterator[WatchEvent[M]]:
        return self

    async def __anext__(self) -> WatchEvent[M]:
        try:
            return await self.get()
        except ClientClosedError:
            raise StopAsyncIteration from None

    async def get(self, timeout: float | None = None) -> WatchEvent[M]:
        """The next event; :class:`WaitTimeoutError` after ``timeout`` seconds.

        Raises :class:`ClientClosedError` once the watch is closed and drained.
        """
        if self._entry.callback is not None:
            raise UsageError("this watch delivers to its on_event callback")
        buffer = self._entry.buffer
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._ready.clear()
            event = buffer.pop()
            if event is not None:
                return event
            if buffer.closed:
                raise ClientClosedError("the watch is closed")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WaitTimeoutError(f"no event for {self.type_url} within {timeout}s")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ready.wait(), remaining)

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

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()


class AsyncXdsClient:
    """The asyncio twin of :class:`XdsClient`, with the same options and behaviour.

    Use ``async with AsyncXdsClient(...) as client``; the client starts on
    first use inside a running event loop and must be closed with
    ``await client.close()``.
    """

    def __init__(
        self, servers: ServerSpec | Iterable[ServerSpec], **options: Unpack[ClientArgs]
    ) -> None:
        one = isinstance(servers, (str, ServerTarget))
        server_list: Any = servers if one else list(servers)  # type: ignore[arg-type]
        self._options = build_options(server_list, **options)
        self._session = Session(self._options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: asyncio.Queue[tuple[Any, ...] | None] | None = None
        self._io: asyncio.Task[None] | None = None
        self._transports: dict[int, AsyncTransport] = {}
        self._streams: dict[str, tuple[int, AsyncStream, asyncio.Task[None]]] = {}
        self._helpers: set[asyncio.Task[Any]] = set()
        self._closed = False

    @classmethod
    def from_bootstrap(
        cls, path: str | os.PathLike[str] | None = None, **options: Unpack[ClientArgs]
    ) -> AsyncXdsClient:
        """A client configured by a gRPC xDS bootstrap file; see ``XdsClient.from_bootstrap``."""
        bootstrap = load_bootstrap(path)
        options.setdefault("node", bootstrap.node)
        options.setdefault("authorities", bootstrap.authorities)
        return cls(bootstrap.servers, **options)

    def _start(self) -> asyncio.Queue[tuple[Any, ...] | None]:
        if self._closed:
            raise ClientClosedError("the client is closed; create a new one")
        if self._inbox is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                raise UsageError("AsyncXdsClient needs a running event loop") from None
            self._inbox = asyncio.Queue()
            self._io = self._loop.create_task(self._run(), name="xds-client-io")
        return self._inbox

    # ------------------------------------------------------------------ public API

    @overload
    def watch(
        self,
        resource: type[M],
        names: str | Iterable[str] | None = None,
        *,
        on_event: Callable[[WatchEvent[M]], object] | None = None,
    ) -> AsyncWatch[M]: ...
    @overload
    def watch(
        self,
        resource: ResourceType[M],
        names: str | Iterable[str] | None = None,
        *,
        on_event: Callable[[WatchEvent[M]], object] | None = None,
    ) -> AsyncWatch[M]: ...
    @overload
    def watch(
        self,
        resource: str,
        names: str | Iterable[str] | None = None,
        *,
        on_event: Callable[[WatchEvent[Message]], object] | None = None,
    ) -> AsyncWatch[Message]: ...
    def watch(
        self, resource: ResourceSpec, names: str | Iterable[str] | None = None, *,
        on_event: Callable[[WatchEvent[Any]], object] | None = None,
    ) -> AsyncWatch[Any]:  # fmt: skip
        """Watch ``names`` (one, several, or None for every resource) of a type.

        Must be called inside the running loop. ``on_event`` may be a plain
        function or a coroutine function; it runs on the loop.
        """
        self._start()
        rtype = resolve_type(resource, self._options.api_version)
        wanted = normalize_names(names)
        buffer = EventBuffer(self._options.queue_size)
        ready = asyncio.Event()
        if on_event is not None:
            callback = on_event
            buffer.set_wake(lambda: self._schedule_callbacks(buffer, callback))
        else:
            buffer.set_wake(ready.set)
        entry = self._session.add_watch(rtype, wanted, buffer, on_event, time.monotonic())
        self._wake()
        return AsyncWatch(self, entry, rtype, ready)

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
    async def wait_for(
        self,
        resource: type[M],
        name: str,
        *,
        version: str | None = None,
        predicate: Callable[[M], bool] | None = None,
        timeout: float = 10.0,
    ) -> M: ...
    @overload
    async def wait_for(
        self,
        resource: ResourceType[M],
        name: str,
        *,
        version: str | None = None,
        predicate: Callable[[M], bool] | None = None,
        timeout: float = 10.0,
    ) -> M: ...
    @overload
    async def wait_for(
        self,
        resource: str,
        name: str,
        *,
        version: str | None = None,
        predicate: Callable[[Message], bool] | None = None,
        timeout: float = 10.0,
    ) -> Message: ...
    async def wait_for(
        self, resource: ResourceSpec, name: str, *, version: str | None = None,
        predicate: Callable[[Any], bool] | None = None, timeout: float = 10.0,
    ) -> Any:  # fmt: skip
        """Wait until ``name`` is present (at ``version``, meeting ``predicate``).

        Returns the message; raises :class:`WaitTimeoutError` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        last: WatchEvent[Any] | None = None
        with self.watch(resource, name) as watch:
            while True:
                remaining = deadline - time.monotonic()
                try:
                    event = await watch.get(max(0.0, remaining))
                except (WaitTimeoutError, ClientClosedError) as exc:
                    raise WaitTimeoutError(
                        describe_wait(watch.type_url, name, version, timeout, last)
                    ) from exc
                if matches(event, name, version, predicate):
                    return event.resource  # type: ignore[union-attr]
                last = event

    def watch_config(
        self, listener: str, *, authority: str | None = None, max_aggregate_depth: int = 16
    ) -> AsyncConfigWatch:
        """Follow ``listener`` to its routes, clusters and endpoints (docs/graph.md).

        Yields a :class:`~xds_client.graph.ConfigSnapshot` each time the whole graph
        is complete (every dependency arrived or known missing) and changed. With
        ``authority``, only the clusters of the virtual host it selects are followed
        (gRFC A74's client behaviour); by default every virtual host's are.
        """
        from xds_client.graph import AsyncConfigWatch  # imported on use: route protos are heavy

        return AsyncConfigWatch(
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

    async def close(self) -> None:
        """End every stream and task (within about a second); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._io is None:
            self._session.close()
            return
        self._wake()
        try:
            await asyncio.wait_for(asyncio.shield(self._io), _CLOSE_TIMEOUT)
        except asyncio.TimeoutError:
            self._io.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._io
        for helper in list(self._helpers):
            helper.cancel()
        if self._helpers:
            await asyncio.gather(*self._helpers, return_exceptions=True)

    async def __aenter__(self) -> Self:
        self._start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.close()

    # ------------------------------------------------------------------ the I/O task

    def _wake(self) -> None:
        if self._inbox is not None:
            self._inbox.put_nowait(None)

    def _schedule_callbacks(self, buffer: EventBuffer, callback: Callable[[Any], object]) -> None:
        if self._loop is None:
            return
        self._loop.call_soon(self._run_callbacks, buffer, callback)

    def _run_callbacks(self, buffer: EventBuffer, callback: Callable[[Any], object]) -> None:
        while (event := buffer.pop()) is not None:
            try:
                result = callback(event)
            except Exception:
                log.exception("on_event callback raised; the watch goes on")
                continue
            if inspect.isawaitable(result):
                self._spawn(self._await_callback(result))

    @staticmethod
    async def _await_callback(result: Any) -> None:
        try:
            await result
        except Exception:
            log.exception("on_event callback raised; the watch goes on")

    def _spawn(self, coro: Any) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._helpers.add(task)
        task.add_done_callback(self._helpers.discard)

    async def _run(self) -> None:
        inbox = self._inbox
        assert inbox is not None
        try:
            while not self._closed:
                await self._perform(self._session.step(time.monotonic()))
                wake_at = self._session.next_wakeup()
                timeout = None if wake_at is None else max(0.0, wake_at - time.monotonic())
                try:
                    item = await asyncio.wait_for(inbox.get(), timeout)
                except asyncio.TimeoutError:
                    continue
                while True:
                    if item is not None:
                        self._handle(item)
                    try:
                        item = inbox.get_nowait()
                    except asyncio.QueueEmpty:
                        break
        except Exception:
            log.exception("xds client I/O task crashed")
        finally:
            await self._perform(self._session.close())
            for key in list(self._streams):
                await self._drop_stream(key)
            for transport in self._transports.values():
                try:
                    await transport.close()
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

    def _transport(self, server: int) -> AsyncTransport:
        transport = self._transports.get(server)
        if transport is None:
            transport = make_transport(
                self._options.transport, self._session.target(server),
                poll_interval=self._options.poll_interval, asynchronous=True,
            )  # fmt: skip
            self._transports[server] = transport
        return transport

    async def _perform(self, actions: list[Action]) -> None:
        inbox = self._inbox
        assert inbox is not None
        for action in actions:
            if isinstance(action, SendRequest):
                current = self._streams.get(action.slot)
                if current is None or current[0] != action.attempt:
                    continue
                try:
                    await current[1].send(action.request)
                except TransportError as exc:
                    inbox.put_nowait(("failure", action.slot, action.attempt, exc))
            elif isinstance(action, OpenStream):
                await self._open(action)
            elif isinstance(action, CloseStream):
                current = self._streams.get(action.slot)
                if current is not None and current[0] == action.attempt:
                    await self._drop_stream(action.slot)
            elif isinstance(action, ProbeServer):
                self._probe(action)
            elif isinstance(action, SaveConfig):
                # Off the loop (10,000 resources: ~0.3 s); awaited, so writes stay in order.
                await asyncio.to_thread(action.write)

    async def _open(self, action: OpenStream) -> None:
        inbox = self._inbox
        assert inbox is not None
        assert self._loop is not None
        await self._drop_stream(action.slot)
        try:
            stream = await self._transport(action.server).open(action.spec)
        except Exception as exc:
            inbox.put_nowait(("failure", action.slot, action.attempt, exc))
            return
        reader = self._loop.create_task(self._read(action.slot, action.attempt, stream))
        self._streams[action.slot] = (action.attempt, stream, reader)

    async def _drop_stream(self, key: str) -> None:
        current = self._streams.pop(key, None)
        if current is None:
            return
        _, stream, reader = current
        reader.cancel()
        try:
            await stream.close()
        except Exception:
            log.exception("closing a stream failed")
        with contextlib.suppress(asyncio.CancelledError):
            await reader

    async def _read(self, key: str, attempt: int, stream: AsyncStream) -> None:
        inbox = self._inbox
        assert inbox is not None
        while True:
            try:
                response = await stream.recv(None)
            except asyncio.CancelledError:
                return
            except Exception as exc:
                inbox.put_nowait(("failure", key, attempt, exc))
                return
            if response is not None:
                inbox.put_nowait(("response", key, attempt, response))

    def _probe(self, action: ProbeServer) -> None:
        transport = self._transport(action.server)
        probe = getattr(transport, "probe", None)
        if probe is None:
            return  # no way to tell: stay on the fallback until it fails
        timeout = min(1.0, self._options.fallback_probe_interval)
        inbox = self._inbox
        assert inbox is not None

        async def run() -> None:
            try:
                ok = bool(await probe(timeout))
            except Exception:
                ok = False
            inbox.put_nowait(("probe", action.slot, action.server, ok))

        self._spawn(run())


def _to_wall(monotonic: float) -> float:
    return time.time() - (time.monotonic() - monotonic)
