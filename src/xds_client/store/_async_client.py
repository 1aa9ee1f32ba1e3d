"""AsyncResourceStoreClient: the asyncio client of Grafana's ResourceStore, on ``grpc.aio``.

Written once for asyncio; ``tools/gen_sync.py`` generates the thread twin
(``_client.py``) from it. Decisions live in the shared sans-I/O modules (``_list``,
``_watch``, ``_retry``, ``_bulk``, ``_search``); what differs between threads and
asyncio (calls, streams, sleeps, timers, channels) is in :mod:`xds_client._backends`.
"""

from __future__ import annotations

import asyncio  # async-only
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import grpc
import grpc.aio  # async-only

from xds_client._backends.asyncio import (
    CALL_FAILURES,
    AsyncEvent,
    TimerHandle,
    call_later,
    finish_call,
    open_channel,
    read_message,
    sleep,
    start_call,
    task_cancelling,  # async-only
    unary_call,
)
from xds_client._tables import objects_table
from xds_client.errors import ClientClosedError, UsageError
from xds_client.store import _auth, _bulk, _calls, _quota, _search
from xds_client.store._async_informer import AsyncInformer
from xds_client.store._auth import IdToken, TokenExchange
from xds_client.store._bulk import BulkItem, BulkResult
from xds_client.store._calls import DEFAULT_PAGE_SIZE, ListPage, ListPager
from xds_client.store._dialect import Dialect, ListSource
from xds_client.store._errors import (
    ConflictError,
    MessageTooLargeError,
    ResourceStoreError,
    from_rpc_error,
)
from xds_client.store._informer_cache import IndexFunc
from xds_client.store._keys import ResourceKey, StoredObject, Value, require_name
from xds_client.store._proto import resource_pb2_grpc as pb_grpc
from xds_client.store._proto import search_pb2_grpc as search_grpc
from xds_client.store._quota import QuotaUsage
from xds_client.store._reflector import ReflectorBackoff, watch_timeout
from xds_client.store._retry import (
    CONFLICT_BACKOFF,
    DEFAULT_RETRY,
    RetryPolicy,
    RetryRun,
    attempt_timeout,
    retryable_read,
    surely_not_sent,
)
from xds_client.store._search import KindStats, SearchResult
from xds_client.store._selector import Requirement, to_field_requirements, to_requirements
from xds_client.store._watch import Step, StoreWatchEvent, WatchState
from xds_client.transport._base import ChannelCredentialsConfig, ServerTarget
from xds_client.transport._channel import channel_arguments

__all__ = ["AsyncResourceStoreClient", "AsyncListIterator", "AsyncStoreWatch"]

_T = TypeVar("_T")

Selector = str | Sequence[Requirement] | None

# A read-ahead page that failed is fetched again by an ordinary call (with retries).
_PAGE_FAILURES: tuple[type[BaseException], ...] = (*CALL_FAILURES, ResourceStoreError)


class AsyncResourceStoreClient:
    """An asyncio client of Grafana's ResourceStore gRPC API.

    ``target`` is ``"host:port"``, a :class:`~xds_client.transport.ServerTarget` (the
    xDS clients' vocabulary: TLS, call metadata and credentials, keepalive, channel
    options), or an existing channel (not closed by :meth:`aclose`). A string or a
    target without credentials makes an insecure channel unless ``credentials`` are
    given: a :class:`~xds_client.transport.ChannelCredentialsConfig` as for the xDS
    clients, or ready-made ``grpc.ChannelCredentials``. ``access_token`` (a
    :class:`~xds_client.store.TokenExchange`) sends Grafana's ``X-Access-Token`` on
    every call, and ``id_token`` the user's ``X-Id-Token`` (a string, or a callable
    asked at each call that returns the token or None when there is no user).
    Create it inside a running loop; ``list`` and ``watch`` return async iterators.
    """

    def __init__(
        self,
        target: str | ServerTarget | grpc.aio.Channel,
        *,
        credentials: ChannelCredentialsConfig | grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        timeout: float | None = 30.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        metadata: Sequence[tuple[str, str]] = (),
        dialect: Dialect | str = Dialect.GRAFANA,
        max_message_size: int = _calls.DEFAULT_MAX_MESSAGE_SIZE,
        access_token: TokenExchange | None = None,
        id_token: IdToken = None,
    ) -> None:
        call_metadata: tuple[tuple[str, str], ...] = ()
        if isinstance(target, str | ServerTarget):
            server = _calls.store_target(target, credentials, options, max_message_size)
            ready = credentials if isinstance(credentials, grpc.ChannelCredentials) else None
            self._channel = open_channel(*channel_arguments(server, ready))
            self._owns_channel = True
            call_metadata = server.call_metadata
        else:
            _calls.channel_options(options, max_message_size)  # the same checks
            self._channel = target
            self._owns_channel = False
        self._stub = pb_grpc.ResourceStoreStub(self._channel)
        self._diag = pb_grpc.DiagnosticsStub(self._channel)
        self._bulk = pb_grpc.BulkStoreStub(self._channel)
        self._index = search_grpc.ResourceIndexStub(self._channel)
        self._quotas = pb_grpc.QuotasStub(self._channel)
        self.timeout = timeout
        """Deadline of each unary call attempt, in seconds."""
        self.retry = retry
        """The retry policy of unary calls and of watch resumption."""
        self.dialect = Dialect.of(dialect)
        """The wire dialect: today's Grafana (default) or the seed's first proto."""
        self.max_message_size = max_message_size
        """The largest gRPC message sent or received, in bytes (gRPC's default is 4 MiB)."""
        self._metadata = (*call_metadata, *metadata)
        self._access_token = access_token
        self._id_token = id_token
        self._closed = False
        self._sleep: Callable[[float], Awaitable[None]] = sleep

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.dialect.value} {state}>"

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
            raise ClientClosedError(f"this {type(self).__name__} is closed")

    # ------------------------------------------------------------ plumbing

    async def _call_metadata(self) -> tuple[tuple[str, str], ...]:
        """Each call's metadata: the static pairs, the access token, the user's ID token."""
        access, token = self._access_token, None
        if access is not None:
            token = access.cached()
            if token is None:  # one exchange at a time per credential (asyncio: off the loop)
                token = await asyncio.to_thread(access.token)  # async-only
                # sync-only: token = access.token()
        if token is None and self._id_token is None:
            return self._metadata
        return _auth.call_metadata(self._metadata, token, _auth.id_token_of(self._id_token))

    def _refused(self, error: ResourceStoreError) -> None:
        # The server refused the kept token (expired early, keys rotated): the next
        # call exchanges again instead of sending it until it expires.
        if self._access_token is not None and error.code == 401:
            self._access_token.invalidate()

    async def _call(
        self,
        method: Any,
        request: Any,
        handle: Callable[[Any, Sequence[Any] | None], _T],
        *,
        write: bool = False,
    ) -> _T:
        self._check_open()
        if write:
            _calls.check_request_size(request, self.max_message_size)
        started = time.monotonic()
        retries = RetryRun(self.retry, surely_not_sent if write else retryable_read, started)
        while True:
            timeout = attempt_timeout(self.timeout, self.retry, started, time.monotonic())
            metadata = await self._call_metadata()  # a failed exchange is not a failed call
            try:
                try:
                    resp, trailing = await unary_call(
                        method, request, timeout=timeout, metadata=metadata
                    )
                except grpc.RpcError as exc:
                    raise from_rpc_error(exc, exc.trailing_metadata()) from exc
                return handle(resp, trailing)
            except ResourceStoreError as exc:
                self._refused(exc)
                delay = retries.failed(exc, time.monotonic())
                if delay is None:
                    raise
            await self._sleep(delay)

    async def _list_call(self, pager: ListPager, handle: Callable[[Any, Any], _T]) -> _T:
        # Grafana checks its 2 MiB page budget before adding the next item, so a page
        # of large objects can pass the 4 MiB message limit: ask for the same page
        # with half the limit (down to one object) instead of failing.
        while True:
            try:
                return await self._call(self._stub.List, pager.request(), handle)
            except MessageTooLargeError:
                if not pager.halve_limit():
                    raise

    # ------------------------------------------------------------ CRUD

    async def create(self, key: ResourceKey, value: Value) -> int:
        """Create an object; returns its resource version.

        ``value`` is JSON bytes or a mapping (encoded as JSON, with
        ``metadata.name``/``namespace`` filled from the key). Raises
        :class:`AlreadyExistsError` when the key exists.
        """
        require_name(key)
        return await self._call(
            self._stub.Create, _calls.create_request(key, value), _calls.create_result, write=True
        )

    async def read(self, key: ResourceKey, *, resource_version: int = 0) -> StoredObject:
        """Read an object (the latest, or at ``resource_version``); 404 raises NotFoundError."""
        require_name(key)
        return await self._call(
            self._stub.Read,
            _calls.read_request(key, resource_version, self.dialect),
            lambda resp, md: _calls.read_result(key, resp, md),
        )

    async def update(self, key: ResourceKey, value: Value, *, resource_version: int) -> int:
        """Replace an object if it is still at ``resource_version`` (0: unconditionally).

        Returns the new resource version; a stale version is :class:`ConflictError`.
        """
        require_name(key)
        return await self._call(
            self._stub.Update,
            _calls.update_request(key, value, resource_version),
            _calls.update_result,
            write=True,
        )

    async def delete(self, key: ResourceKey, *, resource_version: int = 0, uid: str = "") -> int:
        """Delete an object (if still at ``resource_version`` / ``uid`` when given).

        Returns the resource version of the deletion.
        """
        require_name(key)
        return await self._call(
            self._stub.Delete,
            _calls.delete_request(key, resource_version, uid),
            _calls.delete_result,
            write=True,
        )

    async def read_modify_write(
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
        attempt = 0
        while True:
            attempt += 1
            try:
                current = await self.read(key)
                return await self.update(
                    key, _calls.modify(current, fn), resource_version=current.resource_version
                )
            except ConflictError:
                if attempt >= max_attempts:
                    raise
            await self._sleep(CONFLICT_BACKOFF.delay(1))

    async def is_healthy(self) -> bool:
        """Whether the server's Diagnostics service reports SERVING.

        Transient failures (UNAVAILABLE, 429) are retried as reads are; False
        once the retry policy gives up or the server answers NOT_SERVING.
        """
        try:
            return await self.health() == "SERVING"
        except ResourceStoreError:
            return False

    async def health(self) -> str:
        """The status the server's Diagnostics service reports (``"SERVING"``, ``"NOT_SERVING"``).

        Unlike :meth:`is_healthy`, a server that cannot be asked raises: an
        :class:`UnavailableError` for one that cannot be reached, a
        :class:`StoreNotImplementedError` for a peer that is not a ResourceStore.
        """
        return await self._call(
            self._diag.IsHealthy,
            _calls.health_request(),
            lambda resp, _md: _calls.health_status(resp),
        )

    async def bulk(
        self,
        collection: ResourceKey,
        items: Iterable[BulkItem | tuple[ResourceKey, Value]],
        *,
        rebuild: bool = True,
        timeout: float | None = None,
    ) -> BulkResult:
        """Replace a whole collection with ``items`` in one client stream (BulkProcess).

        ``collection`` is a prefix (namespace, group, resource); ``items`` are
        ``(key, value)`` pairs or :class:`BulkItem` values, consumed lazily. Bulk is
        a rebuild: the collection holds exactly the items afterwards, in one
        transaction; an invalid item rolls it all back and raises. ``rebuild=False``
        is refused with :class:`UsageError` before anything is sent (Grafana clears
        the collection whatever the flag says; older versions answer 400). An error
        raised by ``items`` itself reaches the caller as it is. Needs the
        ``grafana`` dialect; never retried.
        """
        self._check_open()
        _bulk.check_dialect(self.dialect)
        _bulk.check_rebuild(collection, rebuild)
        metadata = (
            *await self._call_metadata(),
            *_bulk.settings_metadata(collection, rebuild=rebuild),
        )
        feed = _bulk.RequestFeed(_bulk.requests(collection, items))
        try:
            resp, trailing = await unary_call(
                self._bulk.BulkProcess, iter(feed), timeout=timeout, metadata=metadata
            )
        except grpc.RpcError as exc:
            if feed.error is not None:
                raise feed.error from None
            raise from_rpc_error(exc, exc.trailing_metadata()) from exc
        except asyncio.CancelledError:  # async-only
            # grpc.aio cancels the call when the request iterator raises.  # async-only
            if feed.error is None or task_cancelling():  # async-only
                raise  # async-only
            raise feed.error from None  # async-only
        return _bulk.result(resp, trailing)

    async def search(
        self,
        prefix: ResourceKey,
        query: str = "",
        *,
        labels: Selector = None,
        fields: Sequence[str] = (),
        limit: int = 50,
        offset: int = 0,
        sort: Sequence[str] = (),
        facets: Mapping[str, int] | Sequence[str] = (),
    ) -> SearchResult:
        """Search one resource type (Grafana's ResourceIndex, which clients may call directly).

        ``query`` is free text (empty: every object), ``labels`` a selector,
        ``fields`` the columns to return (empty: the server's defaults, such as
        ``title``, ``folder`` and ``tags``), ``sort`` field names (``"-title"``
        descending), ``facets`` fields to count terms of (a mapping gives each
        one's top-N). Page with ``offset`` and ``limit``; the result's
        ``has_more`` says when to stop. The index may lag the store. Needs the
        ``grafana`` dialect.
        """
        _bulk.check_dialect(self.dialect, "search")
        request = _search.search_request(
            prefix,
            query,
            labels=to_requirements(labels),
            fields=fields,
            limit=limit,
            offset=offset,
            sort=sort,
            facets=facets,
        )
        return await self._call(
            self._index.Search,
            request,
            lambda resp, md: _search.search_result(resp, md, offset),
        )

    async def stats(
        self, namespace: str, *, kinds: Sequence[str] = (), folders: Sequence[str] = ()
    ) -> list[KindStats]:
        """How many objects each kind (``"group/resource"``) has in ``namespace``."""
        _bulk.check_dialect(self.dialect, "stats")
        return await self._call(
            self._index.GetStats,
            _search.stats_request(namespace, kinds, folders),
            _search.stats_result,
        )

    async def list_stored_resources(
        self, namespace: str = "", *, group: str = "", resource: str = ""
    ) -> list[ResourceKey]:
        """The collections that hold objects, as keys without a name (sorted).

        Empty arguments match every namespace, group or resource. Cheaper than
        :meth:`stats` (nothing is counted). Needs the ``grafana`` dialect and a
        server that has the call (newer Grafana; older ones answer 501).
        """
        _bulk.check_dialect(self.dialect, "list_stored_resources")
        return await self._call(
            self._stub.ListStoredResources,
            _quota.stored_request(namespace, group, resource),
            _quota.stored_result,
        )

    async def quota_usage(self, collection: ResourceKey) -> QuotaUsage:
        """How many objects a collection (namespace, group, resource) holds, and may hold.

        A create beyond the limit is refused with
        :class:`~xds_client.store.QuotaExceededError`. Needs the ``grafana``
        dialect; a server without quotas answers 501.
        """
        _bulk.check_dialect(self.dialect, "quota_usage")
        return await self._call(
            self._quotas.GetQuotaUsage,
            _quota.quota_request(collection),
            lambda resp, md: _quota.quota_result(collection, resp, md),
        )

    # ------------------------------------------------------------ list

    async def list_page(
        self,
        prefix: ResourceKey,
        *,
        labels: Selector = None,
        limit: int = DEFAULT_PAGE_SIZE,
        page_token: str = "",
        resource_version: int = 0,
        exact: bool = False,
        source: ListSource | str = ListSource.STORE,
        fields: Selector = None,
    ) -> ListPage:
        """One page of a list; pass its ``next_page_token`` back as ``page_token``."""
        pager = ListPager(
            prefix,
            to_requirements(labels),
            limit=limit,
            resource_version=resource_version,
            token=page_token,
            exact=exact,
            source=source,
            fields=to_field_requirements(fields),
            dialect=self.dialect,
        )
        return await self._list_call(pager, pager.on_page)

    def list(
        self,
        prefix: ResourceKey,
        *,
        labels: Selector = None,
        limit: int = DEFAULT_PAGE_SIZE,
        resource_version: int = 0,
        exact: bool = False,
        source: ListSource | str = ListSource.STORE,
        fields: Selector = None,
    ) -> AsyncListIterator:
        """Every object under ``prefix``, page by page (``limit`` per page).

        ``labels`` is a selector string such as ``"app=web,tier in (a,b),!legacy"``
        or a sequence of :class:`Requirement`; ``fields`` a field selector such
        as ``"metadata.name=a"``. Both are applied again on the client. With
        ``exact`` the list shows the store as it was at ``resource_version``
        (410 once that is older than the kept history). ``source`` ``"history"``
        (every kept version of the object named by ``prefix``, newest first) and
        ``"trash"`` (deleted objects) need the ``grafana`` dialect. The
        iterator's ``resource_version`` is the list's version; the next page is
        requested while the current one is handed out.
        """
        self._check_open()
        pager = ListPager(
            prefix,
            to_requirements(labels),
            limit=limit,
            resource_version=resource_version,
            exact=exact,
            source=source,
            fields=to_field_requirements(fields),
            dialect=self.dialect,
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
        timeout: float | None = None,
        known: Iterable[StoredObject] = (),
        fields: Selector = None,
    ) -> AsyncStoreWatch:
        """Watch changes under ``prefix``, resuming after failures; never ends by itself.

        ``since`` is the resource version to start after (0: from now). With
        ``send_initial_events`` the current objects come first as ``added``
        events, then a bookmark with ``initial_events_end`` set. Dropped
        streams resume from the last version seen. After a 410 (or a version
        ahead of the server's) the watch lists again, emits the differences
        from what it knows and a ``resynced`` event whose ``objects`` is the
        complete list. It knows the objects it reported itself, plus ``known``
        (the list that gave ``since``): an object deleted during the gap that it
        never reported and that is not in ``known`` cannot be reported as
        deleted, so a consumer keeping a view replaces it with
        ``resynced.objects``, which converges. Close it (or use
        ``async with``) to stop; with ``timeout`` it also stops by itself that many
        seconds after iteration starts (a notebook cell that cannot hang).
        """
        if timeout is not None and timeout <= 0:
            raise UsageError("timeout must be positive or None")
        self._check_open()
        initial: Literal["none", "server"] = "server" if send_initial_events else "none"
        state = WatchState(
            prefix,
            to_requirements(labels),
            since=since,
            initial=initial,
            policy=self.retry,
            known=known,
            fields=to_field_requirements(fields),
        )
        return AsyncStoreWatch(self, state, timeout=timeout)

    def informer(
        self,
        prefix: ResourceKey,
        labels: Selector = None,
        *,
        on_add: Callable[[StoredObject], None] | None = None,
        on_update: Callable[[StoredObject, StoredObject], None] | None = None,
        on_delete: Callable[[StoredObject], None] | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        resync_period: float | None = None,
        backoff: ReflectorBackoff | None = None,
    ) -> AsyncInformer:
        """A local cache of ``prefix`` kept current by list+watch in a task.

        Start it with ``start()`` or ``async with``; ``wait_synced(timeout)`` waits for
        the first list. It never gives up: after any error it waits (``backoff``:
        800 ms doubling to 30 s, as client-go), lists again and reports the
        differences to the handlers. ``indexers`` maps index names to functions of
        an object (see :func:`label_index`) for ``by_index``; ``resync_period``
        calls ``on_update(obj, obj)`` for every object that often. Handlers run
        outside the informer's lock: they may read the informer.
        """
        self._check_open()
        informer = AsyncInformer(
            lambda: AsyncStoreWatch(self, state),
            on_add=on_add,
            on_update=on_update,
            on_delete=on_delete,
            indexers=indexers,
            resync_period=resync_period,
            backoff=backoff,
            prefix=prefix.prefix(),
        )
        # The watch reads the informer's dict as what it knows (the informer applies
        # every event it emits), so each object is held once, not by both.
        state = WatchState(
            prefix,
            to_requirements(labels),
            initial="list",
            policy=self.retry,
            store=informer._cache.objects,
        )
        return informer


# begin async-only
def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# end async-only
class AsyncListIterator(AsyncIterator[StoredObject]):
    """Iterates a paged list; ``resource_version`` is the list's version once known."""

    def __init__(self, client: AsyncResourceStoreClient, pager: ListPager) -> None:
        self._client = client
        self._pager = pager
        self._items = self._generate()
        # begin async-only
        # The loop its calls run on (the notebook view reads the listing there).
        self._loop = _running_loop()
        # end async-only

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rv={self.resource_version} pages={self.pages}>"

    # sync-only: def _repr_html_(self) -> str:
    # sync-only:     # A notebook shows the list as a table: that reads (uses up) the iterator.
    # sync-only:     return objects_table(list(self))

    # begin async-only
    def _repr_html_(self) -> str:
        # A notebook shows the list as a table, read (used up) on the client's loop. Inside
        # that loop (a Jupyter cell) waiting for it would never end: say how to read it.
        loop = self._loop
        if loop is None or loop is _running_loop() or loop.is_closed():
            return objects_table(
                [], note=f"{self._pager.prefix}: not read yet; [o async for o in listing] reads it"
            )
        if loop.is_running():  # in another thread
            return objects_table(asyncio.run_coroutine_threadsafe(self._read(), loop).result())
        return objects_table(loop.run_until_complete(self._read()))

    async def _read(self) -> list[StoredObject]:
        return [item async for item in self]

    # end async-only

    @property
    def resource_version(self) -> int:
        """The resource version the list is pinned to (0 before the first page)."""
        return self._pager.resource_version

    @property
    def pages(self) -> int:
        """How many pages were fetched so far."""
        return self._pager.pages

    def __aiter__(self) -> AsyncIterator[StoredObject]:
        # The generator itself, so a for loop runs without a Python call per item.
        return self._items

    async def __anext__(self) -> StoredObject:
        return await self._items.__anext__()

    async def _generate(self) -> AsyncIterator[StoredObject]:
        pager, client = self._pager, self._client
        method = client._stub.List
        prefix = pager.prefix
        page = await client._list_call(pager, pager.on_page_wire)
        while True:
            ahead = None
            if not pager.done:
                # The next page is requested before this one is handed out, so the
                # server's work overlaps with the caller's. Any failure of that early
                # request is left to the ordinary call (and its retries) below.
                request = pager.request()
                ahead = start_call(
                    method, request, timeout=client.timeout, metadata=await client._call_metadata()
                )
            objects, wire = page
            try:
                if objects is not None:
                    for item in objects:  # async-only
                        yield item  # async-only
                    # sync-only: yield from objects
                elif wire is not None:
                    # Built here, one at a time: positional arguments, no nested
                    # generator, and an object dropped at once never outlives a
                    # collection.
                    for w in wire:
                        yield StoredObject(w.resource_version, w.value, None, prefix)
            except BaseException:
                if ahead is not None:
                    ahead.cancel()  # the caller stopped early (GeneratorExit) or failed
                raise
            if ahead is None:
                return
            client._check_open()
            try:
                page = pager.on_page_wire(*await finish_call(ahead))
            except _PAGE_FAILURES:
                page = await client._list_call(pager, pager.on_page_wire)


class AsyncStoreWatch(AsyncIterator[StoreWatchEvent]):
    """A resumable watch: iterate it for :class:`StoreWatchEvent` values; ``aclose()`` stops it."""

    def __init__(
        self, client: AsyncResourceStoreClient, state: WatchState, *, timeout: float | None = None
    ) -> None:
        self._client = client
        self.state = state
        """The shared watch state (last resource version, counters)."""
        self._stream: Any = None
        self._pager: ListPager | None = None
        self._closed = AsyncEvent()
        self._timeout = timeout
        self._timer: TimerHandle | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed.is_set() else f"rv={self.state.last_rv}"
        return f"<{type(self).__name__} {self.state.prefix} {state}>"

    @property
    def resource_version(self) -> int:
        """The last resource version seen."""
        return self.state.last_rv

    async def aclose(self) -> None:
        """Stop watching; a pending iteration ends (StopAsyncIteration)."""
        self._expire()

    def _expire(self) -> None:
        self._closed.set()
        timer = self._timer
        if timer is not None:
            timer.cancel()
        self._drop_stream()

    async def __aenter__(self) -> AsyncStoreWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncStoreWatch:
        return self

    async def __anext__(self) -> StoreWatchEvent:
        if self._timeout is not None and self._timer is None:
            self._timer = call_later(self._timeout, self._expire)
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
                stream = self._open(await self._client._call_metadata())
                if stream is None:
                    continue
            error: BaseException | None
            try:
                event = await read_message(stream)
            except grpc.RpcError as exc:
                if self._closed.is_set():
                    continue
                if self._client._closed:
                    raise ClientClosedError("the client was closed during the watch") from exc
                error = from_rpc_error(exc, exc.trailing_metadata())
                self._client._refused(error)
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
            await self._pause(state.stream_ended(error))

    def _open(self, metadata: tuple[tuple[str, str], ...]) -> Any:
        client = self._client
        client._check_open()
        # Every stream ends after 5 to 10 minutes and resumes (client-go's watch
        # timeout), so one that died without a word is replaced.
        self._stream = client._stub.Watch(
            self.state.watch_request(), metadata=metadata, timeout=watch_timeout()
        )
        self.state.stream_opened()
        if self._closed.is_set():  # closed while opening (from another thread or a timer)
            self._drop_stream()
            return None
        return self._stream

    def _drop_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()

    async def _pause(self, delay: float) -> None:
        if delay > 0:
            await self._closed.wait(delay)

    async def _list_step(self) -> None:
        state, client = self.state, self._client
        try:
            if state.step is Step.ANCHOR:
                page = await client.list_page(state.prefix, labels=state.requirements, limit=1)
                state.anchored(page.resource_version)
                return
            # One page per step: its events are handed out before the next page
            # is read, so memory is bounded by a page, not by the whole list.
            pager = self._pager
            if pager is None:
                state.list_started()
                pager = self._pager = ListPager(
                    state.prefix,
                    state.requirements,
                    limit=DEFAULT_PAGE_SIZE,
                    dialect=client.dialect,
                    fields=state.fields,
                )
            page = await client._list_call(pager, pager.on_page)
            for item in page.items:
                out = state.list_item(item.resource_version, item.value)
                if out is not None:
                    state.pending.append(out)
            if pager.done and not self._closed.is_set():
                self._pager = None
                state.list_done(pager.resource_version)
        except ResourceStoreError as exc:
            self._pager = None
            await self._pause(state.list_failed(exc))
