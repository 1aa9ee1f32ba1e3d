# Generated from xds_client/store/_async_client.py by tools/gen_sync.py: do not edit.
"""ResourceStoreClient: the blocking client of Grafana's ResourceStore.

Generated from ``_async_client.py`` with the thread backend. Safe to call from a
thread that runs an asyncio loop (notebooks): it uses the plain blocking gRPC
channel, never the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, TypeVar

import grpc
import tenacity

from xds_client._backends.threads import (
    CALL_FAILURES,
    Event,
    finish_call,
    open_channel,
    read_message,
    sleep,
    start_call,
    unary_call,
)
from xds_client.errors import ClientClosedError
from xds_client.store import _list as core
from xds_client.store._errors import ConflictError, ResourceStoreError, from_rpc_error
from xds_client.store._informer import Informer
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
from xds_client.transport._base import ChannelCredentialsConfig, ServerTarget

__all__ = ["ResourceStoreClient", "ListIterator", "StoreWatch"]

_T = TypeVar("_T")

Selector = str | Sequence[Requirement] | None

# A read-ahead page that failed is fetched again by an ordinary call (with retries).
_PAGE_FAILURES: tuple[type[BaseException], ...] = (*CALL_FAILURES, ResourceStoreError)


class ResourceStoreClient:
    """A blocking client of Grafana's ResourceStore gRPC API.

    ``target`` is ``"host:port"`` or a :class:`~xds_client.transport.ServerTarget` (an
    insecure channel unless ``credentials`` are given: a
    :class:`~xds_client.transport.ChannelCredentialsConfig` as for the xDS clients, or
    ``grpc.ChannelCredentials``), or an existing ``grpc.Channel`` (not closed by
    :meth:`close`).
    """

    def __init__(
        self,
        target: str | ServerTarget | grpc.Channel,
        *,
        credentials: ChannelCredentialsConfig | grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        timeout: float | None = 30.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        if isinstance(target, (str, ServerTarget)):
            # The xDS clients' vocabulary: a ServerTarget, or TLS files as a
            # ChannelCredentialsConfig; ready-made gRPC credentials still work.
            if isinstance(target, str):
                config = credentials if isinstance(credentials, ChannelCredentialsConfig) else None
                target = ServerTarget(target, credentials=config, channel_options=tuple(options))
            ready = credentials if isinstance(credentials, grpc.ChannelCredentials) else None
            self._channel = open_channel(target, ready)
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
        self._sleep: Callable[[float], None] = sleep

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the channel (when the client created it); the client cannot be reopened."""
        if not self._closed:
            self._closed = True
            if self._owns_channel:
                self._channel.close()

    def __enter__(self) -> ResourceStoreClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("this ResourceStoreClient is closed")

    # ------------------------------------------------------------ plumbing

    def _call(
        self,
        method: Any,
        request: Any,
        handle: Callable[[Any, Sequence[Any] | None], _T],
        *,
        write: bool = False,
    ) -> _T:
        self._check_open()

        def once() -> _T:
            try:
                resp, trailing = unary_call(
                    method, request, timeout=self.timeout, metadata=self._metadata
                )
            except grpc.RpcError as exc:
                raise from_rpc_error(exc, exc.trailing_metadata()) from exc
            return handle(resp, trailing)

        retrying = tenacity.Retrying(
            sleep=self._sleep,
            **tenacity_kwargs(self.retry, surely_not_sent if write else retryable_read),
        )
        result: _T = retrying(once)
        return result

    # ------------------------------------------------------------ CRUD

    def create(self, key: ResourceKey, value: Value) -> int:
        """Create an object; returns its resource version.

        ``value`` is JSON bytes or a mapping (encoded as JSON, with
        ``metadata.name``/``namespace`` filled from the key). Raises
        :class:`AlreadyExistsError` when the key exists.
        """
        require_name(key)
        return self._call(
            self._stub.Create, core.create_request(key, value), core.create_result, write=True
        )

    def read(self, key: ResourceKey, *, resource_version: int = 0) -> StoredObject:
        """Read an object (the latest, or at ``resource_version``); 404 raises NotFoundError."""
        require_name(key)
        return self._call(
            self._stub.Read,
            core.read_request(key, resource_version),
            lambda resp, md: core.read_result(key, resp, md),
        )

    def update(self, key: ResourceKey, value: Value, *, resource_version: int) -> int:
        """Replace an object if it is still at ``resource_version`` (0: unconditionally).

        Returns the new resource version; a stale version is :class:`ConflictError`.
        """
        require_name(key)
        return self._call(
            self._stub.Update,
            core.update_request(key, value, resource_version),
            core.update_result,
            write=True,
        )

    def delete(self, key: ResourceKey, *, resource_version: int = 0, uid: str = "") -> int:
        """Delete an object (if still at ``resource_version`` / ``uid`` when given).

        Returns the resource version of the deletion.
        """
        require_name(key)
        return self._call(
            self._stub.Delete,
            core.delete_request(key, resource_version, uid),
            core.delete_result,
            write=True,
        )

    def read_modify_write(
        self,
        key: ResourceKey,
        fn: Callable[[Any], Value],
        *,
        max_attempts: int = 10,
    ) -> int:
        """Read, apply ``fn`` to the decoded object, and update; retry on conflict.

        ``fn`` gets a fresh decoded copy each attempt and returns the new value
        (a dict or bytes). Returns the new resource version.
        """
        for attempt in tenacity.Retrying(
            stop=tenacity.stop_after_attempt(max_attempts),
            retry=tenacity.retry_if_exception_type(ConflictError),
            wait=tenacity.wait_random(0, 0.05),
            sleep=self._sleep,
            reraise=True,
        ):
            with attempt:
                current = self.read(key)
                return self.update(
                    key, core.modify(current, fn), resource_version=current.resource_version
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def is_healthy(self) -> bool:
        """Whether the server's Diagnostics service reports SERVING (False if unreachable)."""
        self._check_open()
        try:
            resp = self._diag.IsHealthy(
                core.health_request(), timeout=self.timeout, metadata=self._metadata
            )
        except grpc.RpcError:
            return False
        return core.health_result(resp)

    # ------------------------------------------------------------ list

    def list_page(
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
        return self._call(self._stub.List, pager.request(), pager.on_page)

    def list(
        self,
        prefix: ResourceKey,
        *,
        labels: Selector = None,
        limit: int = DEFAULT_PAGE_SIZE,
        resource_version: int = 0,
    ) -> ListIterator:
        """Every object under ``prefix``, page by page (``limit`` per page).

        ``labels`` is a selector string such as ``"app=web,tier in (a,b),!legacy"``
        or a sequence of :class:`Requirement`; it is applied again on the client.
        The iterator's ``resource_version`` is the list's version.
        """
        self._check_open()
        pager = ListPager(
            prefix, to_requirements(labels), limit=limit, resource_version=resource_version
        )
        return ListIterator(self, pager)

    # ------------------------------------------------------------ watch

    def watch(
        self,
        prefix: ResourceKey,
        *,
        since: int = 0,
        labels: Selector = None,
        send_initial_events: bool = False,
    ) -> StoreWatch:
        """Watch changes under ``prefix``, resuming after failures; never ends by itself.

        ``since`` is the resource version to start after (0: from now). With
        ``send_initial_events`` the current objects come first as ``added``
        events, then a bookmark with ``initial_events_end`` set. Dropped
        streams resume from the last version seen; after a 410 the watch lists
        again, emits the differences and a ``resynced`` event. Close it (or use
        ``with``) to stop.
        """
        self._check_open()
        initial: Literal["none", "server"] = "server" if send_initial_events else "none"
        state = WatchState(
            prefix, to_requirements(labels), since=since, initial=initial, policy=self.retry
        )
        return StoreWatch(self, state)

    def informer(
        self,
        prefix: ResourceKey,
        labels: Selector = None,
        *,
        on_add: Callable[[StoredObject], None] | None = None,
        on_update: Callable[[StoredObject, StoredObject], None] | None = None,
        on_delete: Callable[[StoredObject], None] | None = None,
    ) -> Informer:
        """A local cache of ``prefix`` kept current by list+watch in a thread.

        Start it with ``start()`` or ``with``; ``wait_synced(timeout)`` waits for the
        first list.
        """
        self._check_open()
        state = WatchState(prefix, to_requirements(labels), initial="list", policy=self.retry)
        return Informer(
            lambda: StoreWatch(self, state),
            on_add=on_add,
            on_update=on_update,
            on_delete=on_delete,
        )


class ListIterator(Iterator[StoredObject]):
    """Iterates a paged list; ``resource_version`` is the list's version once known."""

    def __init__(self, client: ResourceStoreClient, pager: ListPager) -> None:
        self._client = client
        self._pager = pager
        self._items = self._generate()

    @property
    def resource_version(self) -> int:
        """The resource version the list is pinned to (0 before the first page)."""
        return self._pager.resource_version

    @property
    def pages(self) -> int:
        """How many pages were fetched so far."""
        return self._pager.pages

    def __iter__(self) -> Iterator[StoredObject]:
        # The generator itself, so a for loop runs without a Python call per item.
        return self._items

    def __next__(self) -> StoredObject:
        return next(self._items)

    def _generate(self) -> Iterator[StoredObject]:
        pager, client = self._pager, self._client
        method = client._stub.List
        items = client._call(method, pager.request(), pager.on_page_items)
        while True:
            if pager.done:
                yield from items
                return
            # The next page is requested before this one is handed out, so the
            # server's work overlaps with the caller's. Any failure of that early
            # request is left to the ordinary call (and its retries) below.
            request = pager.request()
            ahead = start_call(method, request, timeout=client.timeout, metadata=client._metadata)
            try:
                yield from items
            except BaseException:
                ahead.cancel()  # the caller stopped early (GeneratorExit) or failed
                raise
            client._check_open()
            try:
                items = pager.on_page_items(*finish_call(ahead))
            except _PAGE_FAILURES:
                items = client._call(method, request, pager.on_page_items)


class StoreWatch(Iterator[WatchEvent]):
    """A resumable watch: iterate it for :class:`WatchEvent` values; ``close()`` stops it."""

    def __init__(self, client: ResourceStoreClient, state: WatchState) -> None:
        self._client = client
        self.state = state
        """The shared watch state (last resource version, counters)."""
        self._stream: Any = None
        self._closed = Event()

    @property
    def resource_version(self) -> int:
        """The last resource version seen."""
        return self.state.last_rv

    def __repr__(self) -> str:
        state = "closed" if self._closed.is_set() else f"rv={self.state.last_rv}"
        return f"<{type(self).__name__} {self.state.prefix} {state}>"

    def close(self) -> None:
        """Stop watching; a pending iteration ends (StopIteration)."""
        self._closed.set()
        self._drop_stream()

    def __enter__(self) -> StoreWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> StoreWatch:
        return self

    def __next__(self) -> WatchEvent:
        state = self.state
        pending = state.pending
        while True:
            if pending:
                return pending.popleft()
            if self._closed.is_set():
                self._drop_stream()
                raise StopIteration
            stream = self._stream
            if stream is None:
                if state.step is not Step.WATCH:
                    self._list_step()
                    continue
                stream = self._open()
                if stream is None:
                    continue
            error: BaseException | None
            try:
                event = read_message(stream)
            except grpc.RpcError as exc:
                if self._closed.is_set():
                    continue
                if self._client._closed:
                    raise ClientClosedError("the client was closed during the watch") from exc
                error = from_rpc_error(exc, exc.trailing_metadata())
            else:
                if event is None:
                    error = None  # the server ended the stream: resume
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
            self._pause(state.stream_ended(error))

    def _open(self) -> Any:
        client = self._client
        client._check_open()
        self._stream = client._stub.Watch(self.state.watch_request(), metadata=client._metadata)
        self.state.stream_opened()
        if self._closed.is_set():  # closed while opening
            self._drop_stream()
            return None
        return self._stream

    def _drop_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()

    def _pause(self, delay: float) -> None:
        if delay > 0:
            self._closed.wait(delay)

    def _list_step(self) -> None:
        state, client = self.state, self._client
        try:
            if state.step is Step.ANCHOR:
                page = client.list_page(state.prefix, labels=state.requirements, limit=1)
                state.anchored(page.resource_version)
                return
            state.list_started()
            pager = ListPager(state.prefix, state.requirements, limit=DEFAULT_PAGE_SIZE)
            while not pager.done and not self._closed.is_set():
                page = client._call(client._stub.List, pager.request(), pager.on_page)
                for item in page.items:
                    out = state.list_item(item.resource_version, item.value)
                    if out is not None:
                        state.pending.append(out)
            if not self._closed.is_set():
                state.list_done(pager.resource_version)
        except ResourceStoreError as exc:
            self._pause(state.list_failed(exc))
