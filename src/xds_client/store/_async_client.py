"""The asyncio ResourceStore client: the twin of ``_client.py`` over ``grpc.aio``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import grpc
import grpc.aio
import tenacity

from xds_client.errors import ClientClosedError
from xds_client.store import _list as core
from xds_client.store._async_informer import AsyncInformer
from xds_client.store._errors import ConflictError, ResourceStoreError, from_rpc_error
from xds_client.store._keys import ResourceKey, StoredObject, Value, require_name
from xds_client.store._list import DEFAULT_PAGE_SIZE, ListPage, ListPager
from xds_client.store._proto import resource_pb2_grpc as pb_grpc
from xds_client.store._retry import (
    DEFAULT_RETRY,
    RetryPolicy,
    retryable_read,
    surely_not_sent,
    tenacity_kwargs,
)
from xds_client.store._selector import Requirement, to_requirements
from xds_client.store._watch import Step, WatchEvent, WatchState

__all__ = ["AsyncResourceStoreClient", "AsyncListIterator", "AsyncWatch"]

_T = TypeVar("_T")

Selector = str | Sequence[Requirement] | None


class AsyncResourceStoreClient:
    """An asyncio client of Grafana's ResourceStore gRPC API.

    The same methods as :class:`ResourceStoreClient`, as coroutines; ``list``
    and ``watch`` return async iterators. Create it inside a running loop.
    """

    def __init__(
        self,
        target: str | grpc.aio.Channel,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        timeout: float | None = 30.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        if isinstance(target, str):
            if credentials is not None:
                self._channel = grpc.aio.secure_channel(target, credentials, options=options)
            else:
                self._channel = grpc.aio.insecure_channel(target, options=options)
            self._owns_channel = True
        else:
            self._channel = target
            self._owns_channel = False
        self._stub = pb_grpc.ResourceStoreStub(self._channel)
        self._diag = pb_grpc.DiagnosticsStub(self._channel)
        self.timeout = timeout
        """Deadline of each unary call attempt, in seconds."""
        self.retry = retry
        """The retry policy of unary calls and of watch resumption."""
        self._metadata = tuple(metadata)
        self._closed = False
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    # ------------------------------------------------------------ lifecycle

    async def aclose(self) -> None:
        """Close the channel (when the client created it); the client cannot be reopened."""
        if not self._closed:
            self._closed = True
            if self._owns_channel:
                await self._channel.close()

    async def __aenter__(self) -> AsyncResourceStoreClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("this AsyncResourceStoreClient is closed")

    # ------------------------------------------------------------ plumbing

    async def _call(
        self,
        method: Any,
        request: Any,
        handle: Callable[[Any, Sequence[Any] | None], _T],
        *,
        write: bool = False,
    ) -> _T:
        self._check_open()

        async def once() -> _T:
            call = method(request, timeout=self.timeout, metadata=self._metadata)
            try:
                resp = await call
            except grpc.aio.AioRpcError as exc:
                raise from_rpc_error(exc, exc.trailing_metadata()) from exc
            return handle(resp, await call.trailing_metadata())

        retrying = tenacity.AsyncRetrying(
            sleep=self._sleep,
            **tenacity_kwargs(self.retry, surely_not_sent if write else retryable_read),
        )
        result: _T = await retrying(once)
        return result

    # ------------------------------------------------------------ CRUD

    async def create(self, key: ResourceKey, value: Value) -> int:
        """Create an object; returns its resource version (see the sync twin)."""
        require_name(key)
        return await self._call(
            self._stub.Create, core.create_request(key, value), core.create_result, write=True
        )

    async def read(self, key: ResourceKey, *, resource_version: int = 0) -> StoredObject:
        """Read an object (the latest, or at ``resource_version``)."""
        require_name(key)
        return await self._call(
            self._stub.Read,
            core.read_request(key, resource_version),
            lambda resp, md: core.read_result(key, resp, md),
        )

    async def update(self, key: ResourceKey, value: Value, *, resource_version: int) -> int:
        """Replace an object if it is still at ``resource_version`` (0: unconditionally)."""
        require_name(key)
        return await self._call(
            self._stub.Update,
            core.update_request(key, value, resource_version),
            core.update_result,
            write=True,
        )

    async def delete(self, key: ResourceKey, *, resource_version: int = 0, uid: str = "") -> int:
        """Delete an object (if still at ``resource_version`` / ``uid`` when given)."""
        require_name(key)
        return await self._call(
            self._stub.Delete,
            core.delete_request(key, resource_version, uid),
            core.delete_result,
            write=True,
        )

    async def read_modify_write(
        self,
        key: ResourceKey,
        fn: Callable[[Any], Value],
        *,
        max_attempts: int = 10,
    ) -> int:
        """Read, apply ``fn`` to the decoded object, and update; retry on conflict."""
        async for attempt in tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(max_attempts),
            retry=tenacity.retry_if_exception_type(ConflictError),
            wait=tenacity.wait_random(0, 0.05),
            sleep=self._sleep,
            reraise=True,
        ):
            with attempt:
                current = await self.read(key)
                return await self.update(
                    key, core.modify(current, fn), resource_version=current.resource_version
                )
        raise AssertionError("unreachable")  # pragma: no cover

    async def is_healthy(self) -> bool:
        """Whether the server's Diagnostics service reports SERVING (False if unreachable)."""
        self._check_open()
        try:
            resp = await self._diag.IsHealthy(
                core.health_request(), timeout=self.timeout, metadata=self._metadata
            )
        except grpc.aio.AioRpcError:
            return False
        return core.health_result(resp)

    # ------------------------------------------------------------ list

    async def list_page(
        self,
        prefix: ResourceKey,
        *,
        labels: Selector = None,
        limit: int = DEFAULT_PAGE_SIZE,
        page_token: str = "",
        resource_version: int = 0,
    ) -> ListPage:
        """One page of a list; pass its ``next_page_token`` back as ``page_token``."""
        pager = ListPager(
            prefix,
            to_requirements(labels),
            limit=limit,
            resource_version=resource_version,
            token=page_token,
        )
        return await self._call(self._stub.List, pager.request(), pager.on_page)

    def list(
        self,
        prefix: ResourceKey,
        *,
        labels: Selector = None,
        limit: int = DEFAULT_PAGE_SIZE,
        resource_version: int = 0,
    ) -> AsyncListIterator:
        """Every object under ``prefix``, page by page (an async iterator)."""
        self._check_open()
        pager = ListPager(
            prefix, to_requirements(labels), limit=limit, resource_version=resource_version
        )
        return AsyncListIterator(self, pager)

    # ------------------------------------------------------------ watch

    def watch(
        self,
        prefix: ResourceKey,
        *,
        since: int = 0,
        labels: Selector = None,
        send_initial_events: bool = False,
    ) -> AsyncWatch:
        """Watch changes under ``prefix`` (an async iterator; see the sync twin)."""
        self._check_open()
        initial: Literal["none", "server"] = "server" if send_initial_events else "none"
        state = WatchState(
            prefix, to_requirements(labels), since=since, initial=initial, policy=self.retry
        )
        return AsyncWatch(self, state)

    def informer(
        self,
        prefix: ResourceKey,
        labels: Selector = None,
        *,
        on_add: Callable[[StoredObject], None] | None = None,
        on_update: Callable[[StoredObject, StoredObject], None] | None = None,
        on_delete: Callable[[StoredObject], None] | None = None,
    ) -> AsyncInformer:
        """A local cache of ``prefix`` kept current by list+watch in a task."""
        self._check_open()
        state = WatchState(prefix, to_requirements(labels), initial="list", policy=self.retry)
        return AsyncInformer(
            lambda: AsyncWatch(self, state),
            on_add=on_add,
            on_update=on_update,
            on_delete=on_delete,
        )


class AsyncListIterator(AsyncIterator[StoredObject]):
    """Iterates a paged list; ``resource_version`` is the list's version once known."""

    def __init__(self, client: AsyncResourceStoreClient, pager: ListPager) -> None:
        self._client = client
        self._pager = pager
        self._items: list[StoredObject] = []
        self._index = 0

    @property
    def resource_version(self) -> int:
        """The resource version the list is pinned to (0 before the first page)."""
        return self._pager.resource_version

    @property
    def pages(self) -> int:
        """How many pages were fetched so far."""
        return self._pager.pages

    def __aiter__(self) -> AsyncListIterator:
        return self

    async def __anext__(self) -> StoredObject:
        while True:
            if self._index < len(self._items):
                item = self._items[self._index]
                self._index += 1
                return item
            pager = self._pager
            if pager.done:
                raise StopAsyncIteration
            page = await self._client._call(self._client._stub.List, pager.request(), pager.on_page)
            self._items, self._index = page.items, 0


class AsyncWatch(AsyncIterator[WatchEvent]):
    """A resumable watch: ``async for`` it; ``aclose()`` stops it."""

    def __init__(self, client: AsyncResourceStoreClient, state: WatchState) -> None:
        self._client = client
        self.state = state
        """The shared watch state (last resource version, counters)."""
        self._stream: Any = None
        self._closed = asyncio.Event()

    @property
    def resource_version(self) -> int:
        """The last resource version seen."""
        return self.state.last_rv

    async def aclose(self) -> None:
        """Stop watching; a pending iteration ends (StopAsyncIteration)."""
        self._closed.set()
        self._drop_stream()

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncWatch:
        return self

    async def __anext__(self) -> WatchEvent:
        state = self.state
        pending = state.pending
        while True:
            if pending:
                return pending.popleft()
            if self._closed.is_set():
                self._drop_stream()
                raise StopAsyncIteration
            stream = self._stream
            if stream is None:
                if state.step is not Step.WATCH:
                    await self._list_step()
                    continue
                stream = self._open()
            error: BaseException | None
            try:
                event = await stream.read()
            except grpc.aio.AioRpcError as exc:
                if self._closed.is_set():
                    continue
                if self._client._closed:
                    raise ClientClosedError("the client was closed during the watch") from exc
                error = from_rpc_error(exc, exc.trailing_metadata())
            except asyncio.CancelledError:
                if self._closed.is_set() and not _current_task_cancelling():
                    continue
                raise
            else:
                if event is grpc.aio.EOF:
                    error = None
                else:
                    try:
                        out = state.on_event(event)
                    except ResourceStoreError as exc:
                        error = exc
                    else:
                        if out is not None:
                            return out
                        continue
            self._drop_stream()
            await self._pause(state.stream_ended(error))

    def _open(self) -> Any:
        client = self._client
        client._check_open()
        self._stream = client._stub.Watch(self.state.watch_request(), metadata=client._metadata)
        self.state.stream_opened()
        return self._stream

    def _drop_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()

    async def _pause(self, delay: float) -> None:
        if delay > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closed.wait(), delay)

    async def _list_step(self) -> None:
        state, client = self.state, self._client
        try:
            if state.step is Step.ANCHOR:
                page = await client.list_page(state.prefix, labels=state.requirements, limit=1)
                state.anchored(page.resource_version)
                return
            state.list_started()
            pager = ListPager(state.prefix, state.requirements, limit=DEFAULT_PAGE_SIZE)
            while not pager.done and not self._closed.is_set():
                page = await client._call(client._stub.List, pager.request(), pager.on_page)
                for item in page.items:
                    out = state.list_item(item.resource_version, item.value)
                    if out is not None:
                        state.pending.append(out)
            if not self._closed.is_set():
                state.list_done(pager.resource_version)
        except ResourceStoreError as exc:
            await self._pause(state.list_failed(exc))


def _current_task_cancelling() -> bool:
    # Task.cancelling() is new in Python 3.11; before it, assume a real cancellation.
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or bool(cancelling())
