"""AsyncResourceStoreClient against the in-process SQLite ResourceStoreServer.

``tools/gen_sync.py`` makes the ResourceStoreClient twin (test_client_sync.py) from
this file, so both surfaces run the same test bodies.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import grpc
import pytest

from tests._twin_support import run_async  # async-only
from tests._waiting import wait_until
from xds_client._backends.asyncio import run_blocking, spawn
from xds_client.errors import ClientClosedError, UsageError
from xds_client.store import (
    AlreadyExistsError,
    AsyncResourceStoreClient,
    BadRequestError,
    ConflictError,
    ExpiredError,
    ForbiddenError,
    InternalError,
    InvalidError,
    NotFoundError,
    StoredObject,
    StoreNotImplementedError,
    StoreWatchEvent,
    TooManyRequestsError,
    UnauthorizedError,
    UnavailableError,
)
from xds_client.testing import ResourceStoreServer
from xds_client.transport import ServerTarget

from ._store_support import FAST, PREFIX, doc, key, until

pytestmark = pytest.mark.timeout(60)


def connect(server: ResourceStoreServer) -> AsyncResourceStoreClient:
    return AsyncResourceStoreClient(server.address, retry=FAST, timeout=10)


class AsyncSleeps:
    """A fake sleep that records delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


# ---------------------------------------------------------------- CRUD and errors


@pytest.mark.parametrize("as_details", [False, True], ids=["in-response", "in-details"])
@run_async  # async-only
async def test_crud_and_typed_errors(server: ResourceStoreServer, as_details: bool) -> None:
    server.errors_as_details = as_details
    async with connect(server) as client:
        k = key("a")
        rv = await client.create(k, {"spec": {"title": "A"}})
        obj = await client.read(k)
        assert obj.resource_version == rv
        assert obj.key == k
        assert obj.json()["spec"] == {"title": "A"}
        assert obj.json()["metadata"]["name"] == "a"
        assert json.loads(obj.value)["metadata"]["namespace"] == "default"

        with pytest.raises(AlreadyExistsError) as exists:
            await client.create(k, b'{"spec": {}}')
        assert exists.value.code == 409
        assert exists.value.reason == "AlreadyExists"
        assert isinstance(exists.value, ConflictError)
        assert (exists.value.grpc_code is not None) is as_details

        rv2 = await client.update(k, {"spec": {"title": "B"}}, resource_version=rv)
        assert rv2 > rv
        with pytest.raises(ConflictError) as stale:
            await client.update(k, {"spec": {}}, resource_version=rv)
        assert stale.value.code == 409
        assert not isinstance(stale.value, AlreadyExistsError)
        with pytest.raises(ConflictError):
            await client.delete(k, resource_version=rv)

        with pytest.raises(NotFoundError) as missing:
            await client.read(key("nope"))
        assert missing.value.code == 404
        assert missing.value.details.name == "nope"
        assert missing.value.details.group == PREFIX.group

        with pytest.raises(InvalidError) as invalid:
            await client.create(key("b"), {"metadata": {"name": "other", "labels": {"x": 1}}})
        fields = {c.field for c in invalid.value.causes}
        assert fields == {"metadata.name", "metadata.labels"}
        assert "metadata.name" in str(invalid.value)

        assert (await client.read(k, resource_version=rv)).json()["spec"] == {"title": "A"}
        rv3 = await client.delete(k, resource_version=rv2)
        assert rv3 > rv2
        with pytest.raises(NotFoundError):
            await client.read(k)
        with pytest.raises(NotFoundError):
            await client.delete(k)


@run_async  # async-only
async def test_update_with_version_zero_is_unconditional(server: ResourceStoreServer) -> None:
    async with connect(server) as client:
        k = key("a")
        await client.create(k, doc("A"))
        await client.update(k, doc("B"), resource_version=0)
        assert (await client.read(k)).json()["spec"]["title"] == "B"


@run_async  # async-only
async def test_usage_errors_reprs_and_close(server: ResourceStoreServer) -> None:
    client = AsyncResourceStoreClient(server.address)
    assert repr(client) == "<AsyncResourceStoreClient grafana open>"
    with pytest.raises(UsageError):
        await client.create(PREFIX, doc())
    with pytest.raises(UsageError):
        await client.create(key("a"), ["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        client.watch(PREFIX, timeout=0)
    assert await client.is_healthy()
    watch = client.watch(PREFIX)
    assert repr(watch) == f"<AsyncStoreWatch {PREFIX} rv=0>"
    await watch.aclose()
    assert repr(watch) == f"<AsyncStoreWatch {PREFIX} closed>"
    await client.aclose()
    assert repr(client) == "<AsyncResourceStoreClient grafana closed>"
    with pytest.raises(ClientClosedError, match="AsyncResourceStoreClient is closed"):
        await client.read(key("a"))


@run_async  # async-only
async def test_delete_with_uid_precondition(server: ResourceStoreServer) -> None:
    async with connect(server) as client:
        k = key("a")
        await client.create(k, doc())
        uid = (await client.read(k)).json()["metadata"]["uid"]
        with pytest.raises(ConflictError):
            await client.delete(k, uid="wrong")
        await client.delete(k, uid=uid)


@run_async  # async-only
async def test_unreachable_server_is_unhealthy_and_reads_retry() -> None:
    client = AsyncResourceStoreClient(
        "127.0.0.1:1", timeout=2, retry=FAST.with_max_attempts(3).with_deadline(None)
    )
    sleeps = AsyncSleeps()
    client._sleep = sleeps
    try:
        assert await client.is_healthy() is False
        assert len(sleeps.delays) == 2  # is_healthy retries as reads do
        sleeps.delays.clear()
        with pytest.raises(UnavailableError):
            await client.read(key("a"))
        assert len(sleeps.delays) == 2
        # A write whose connection never came up surely did not reach a server: retried too.
        sleeps.delays.clear()
        with pytest.raises(UnavailableError):
            await client.create(key("a"), doc())
        assert len(sleeps.delays) == 2
    finally:
        await client.aclose()


@run_async  # async-only
async def test_a_server_target_is_the_xds_clients_vocabulary(server: ResourceStoreServer) -> None:
    # TLS settings, call metadata and channel options come from the ServerTarget.
    target = ServerTarget(
        server.address,
        call_metadata=(("x-tenant", "t1"),),
        channel_options=(("grpc.primary_user_agent", "store-test"),),
    )
    async with AsyncResourceStoreClient(target, retry=FAST, timeout=10) as client:
        assert client._metadata == (("x-tenant", "t1"),)
        assert await client.create(key("t"), doc("T")) > 0
        assert (await client.read(key("t"))).json()["spec"]["title"] == "T"


# ---------------------------------------------------------------- retries


@run_async  # async-only
async def test_reads_retry_on_unavailable(server: ResourceStoreServer) -> None:
    async with connect(server) as client:
        await client.create(key("a"), doc())
        server.fail_next(2, grpc.StatusCode.UNAVAILABLE)
        assert (await client.read(key("a"))).key.name == "a"
        assert server.calls["Read"] == 3
        server.fail_next(2, grpc.StatusCode.RESOURCE_EXHAUSTED, methods=["List"])
        assert [o.key.name async for o in client.list(PREFIX)] == ["a"]


@run_async  # async-only
async def test_writes_do_not_retry_when_the_server_may_have_acted(
    server: ResourceStoreServer,
) -> None:
    async with connect(server) as client:
        server.fail_next(1, grpc.StatusCode.UNAVAILABLE)
        with pytest.raises(UnavailableError) as err:
            await client.create(key("a"), doc())
        assert err.value.grpc_code == grpc.StatusCode.UNAVAILABLE
        assert err.value.code == 503
        assert server.calls["Create"] == 1


@pytest.mark.parametrize("as_details", [False, True], ids=["in-response", "in-details"])
@run_async  # async-only
async def test_429_retries_writes_and_honours_retry_after(
    server: ResourceStoreServer, as_details: bool
) -> None:
    server.errors_as_details = as_details
    async with connect(server) as client:
        sleeps = AsyncSleeps()
        client._sleep = sleeps
        server.fail_next(2, 429, retry_after=3)
        assert await client.create(key("a"), doc()) > 0
        assert server.calls["Create"] == 3
        assert sleeps.delays == [3.0, 3.0]

        server.fail_next(10, 429)
        with pytest.raises(TooManyRequestsError) as err:
            await client.update(key("a"), doc("x"), resource_version=0)
        assert err.value.code == 429
        assert server.calls["Update"] == FAST.max_attempts


@run_async  # async-only
async def test_grpc_codes_map_to_http_codes(server: ResourceStoreServer) -> None:
    cases = [
        (grpc.StatusCode.NOT_FOUND, NotFoundError, 404),
        (grpc.StatusCode.ABORTED, ConflictError, 409),
        (grpc.StatusCode.PERMISSION_DENIED, ForbiddenError, 403),
        (grpc.StatusCode.UNAUTHENTICATED, UnauthorizedError, 401),
        (grpc.StatusCode.UNIMPLEMENTED, StoreNotImplementedError, 501),
        (grpc.StatusCode.ALREADY_EXISTS, AlreadyExistsError, 409),
        (grpc.StatusCode.INVALID_ARGUMENT, BadRequestError, 400),
        (grpc.StatusCode.DATA_LOSS, InternalError, 500),
    ]
    async with connect(server) as client:
        for code, cls, http in cases:
            server.fail_next(1, code)
            with pytest.raises(cls) as err:
                await client.read(key("a"))
            assert getattr(err.value, "code", None) == http


@run_async  # async-only
async def test_read_modify_write_retries_on_conflict(server: ResourceStoreServer) -> None:
    k = key("counter")
    calls = 0

    def bump(obj: dict[str, object]) -> dict[str, object]:
        nonlocal calls
        calls += 1
        if calls == 1:  # someone else writes between our read and our update
            server.put(k, {"spec": {"n": 100}})
        spec = obj["spec"]
        assert isinstance(spec, dict)
        return {"spec": {"n": spec["n"] + 1}}

    async with connect(server) as client:
        sleeps = AsyncSleeps()
        client._sleep = sleeps
        await client.create(k, {"spec": {"n": 0}})
        await client.read_modify_write(k, bump)
        assert calls == 2
        assert (await client.read(k)).json()["spec"]["n"] == 101
        assert len(sleeps.delays) == 1
        assert 0 <= sleeps.delays[0] <= 0.05

        # Conflicts every time: the last one is raised after max_attempts.
        def always_raced(obj: dict[str, object]) -> dict[str, object]:
            server.put(k, {"spec": {"n": 0}})
            return obj

        with pytest.raises(ConflictError):
            await client.read_modify_write(k, always_raced, max_attempts=3)
        assert len(sleeps.delays) == 3


# ---------------------------------------------------------------- list


@run_async  # async-only
async def test_list_pages_follow_tokens_and_filter_labels(server: ResourceStoreServer) -> None:
    server.put_many(
        [
            (key(f"o{i:03}"), doc(str(i), app="web" if i % 2 else "db", tier="abc"[i % 3]))
            for i in range(100)
        ]
    )
    server.put(key("legacy"), doc("l", app="web", tier="a", legacy="yes"))
    async with connect(server) as client:
        it = client.list(PREFIX, limit=7)
        names = [o.key.name async for o in it]
        assert len(names) == 101
        assert names == sorted(names)
        assert it.pages == 15
        assert it.resource_version == server.resource_version
        assert repr(it) == f"<AsyncListIterator rv={server.resource_version} pages=15>"

        selector = "app=web,tier in (a,b),!legacy"
        want = [f"o{i:03}" for i in range(100) if i % 2 and i % 3 in (0, 1)]
        for server_filters in (True, False):
            server.filter_labels = server_filters
            it = client.list(PREFIX, labels=selector, limit=10)
            assert [o.key.name async for o in it] == want
            assert it.pages == 11  # short pages still carry a token

        page = await client.list_page(PREFIX, limit=40)
        assert len(page.items) == 40
        assert page.next_page_token
        page2 = await client.list_page(PREFIX, limit=40, page_token=page.next_page_token)
        assert page2.items[0].key.name == "o039"  # "legacy" sorts first
        assert page2.resource_version == page.resource_version


@run_async  # async-only
async def test_list_reads_the_next_page_ahead_and_retries_it(server: ResourceStoreServer) -> None:
    server.put_many([(key(f"o{i:03}"), doc(str(i))) for i in range(30)])
    async with connect(server) as client:
        it = client.list(PREFIX, limit=10)
        first = await it.__anext__()
        assert first.key.name == "o000"
        await run_blocking(until(lambda: server.calls["List"] == 2, "the page read ahead"))
        # The second page was requested while the first is handed out; a failure of a
        # page requested ahead goes through the ordinary call and its retries.
        server.fail_next(2, grpc.StatusCode.UNAVAILABLE, methods=["List"])
        names = [first.key.name, *[o.key.name async for o in it]]
        assert names == [f"o{i:03}" for i in range(30)]
        assert it.pages == 3
        # Stopping early leaves nothing waiting: the client closes cleanly.
        early = client.list(PREFIX, limit=10)
        assert (await early.__anext__()).key.name == "o000"
        del early


@run_async  # async-only
async def test_list_of_10000_items_is_pinned_while_others_write(
    server: ResourceStoreServer,
) -> None:
    server.put_many([(key(f"o{i:05}"), doc(str(i))) for i in range(10_000)])
    stop = threading.Event()
    writes = 0

    def writer() -> None:
        nonlocal writes
        i = 0
        while not stop.is_set() and i < 1000:
            server.put(key(f"o{(i * 7919) % 10_000:05}"), doc(f"changed {i}"))
            if i % 3 == 0:
                server.remove(key(f"o{(i * 104729 + 1) % 10_000:05}"))
                server.put(key(f"new{i:05}"), doc("new"))
            i += 1
            writes = i

    async with connect(server) as client:
        snapshot = {
            o.key.name: (o.resource_version, o.value) async for o in client.list(PREFIX, limit=5000)
        }
        it = client.list(PREFIX, limit=500)
        first = await it.__anext__()
        thread = threading.Thread(target=writer)
        thread.start()
        listed = [first]
        try:
            async for o in it:
                listed.append(o)
        finally:
            stop.set()
            await run_blocking(thread.join)
    assert writes > 0
    assert it.pages == 20
    assert it.resource_version == max(rv for rv, _ in snapshot.values())
    assert {o.key.name: (o.resource_version, o.value) for o in listed} == snapshot
    assert [o.key.name for o in listed] == sorted(snapshot)


@run_async  # async-only
async def test_expired_page_token(server: ResourceStoreServer) -> None:
    server.put_many([(key(f"o{i}"), doc()) for i in range(10)])
    async with connect(server) as client:
        page = await client.list_page(PREFIX, limit=3)
        server.put(key("o1"), doc("changed"))
        server.compact()
        with pytest.raises(ExpiredError) as err:
            await client.list_page(PREFIX, limit=3, page_token=page.next_page_token)
        assert err.value.code == 410


@run_async  # async-only
async def test_default_page_size_and_reads_at_a_version(server: ResourceStoreServer) -> None:
    server.put_many([(key(f"o{i:03}"), doc(str(i))) for i in range(60)])
    async with connect(server) as client:
        page = await client.list_page(PREFIX, limit=0)
        assert len(page.items) == 50
        assert page.next_page_token
        rest = await client.list_page(PREFIX, page_token=page.next_page_token)
        assert (len(rest.items), rest.next_page_token) == (10, "")
        rv = (await client.read(key("o001"))).resource_version
        later = server.put(key("other"), doc())
        server.put(key("o001"), doc("changed"))
        # The version of the object as it was at `later` (unchanged since rv).
        old = await client.read(key("o001"), resource_version=later)
        assert (old.resource_version, old.json()["spec"]["title"]) == (rv, "1")
        server.remove(key("o002"))
        with pytest.raises(NotFoundError):
            await client.read(key("o002"), resource_version=server.resource_version)
        server.compact()
        assert (await client.read(key("o003"), resource_version=later)).resource_version < later
        with pytest.raises(ExpiredError):
            await client.read(key("o001"), resource_version=later)


# ---------------------------------------------------------------- watch


@pytest.mark.parametrize("mode", ["drop", "end"])
@run_async  # async-only
async def test_watch_survives_20_interruptions_without_loss_or_repeat(
    server: ResourceStoreServer, mode: str
) -> None:
    start = server.put(key("seed"), doc())

    def writer() -> None:
        for batch in range(20):
            # Before each batch, not after: after the last one the consumer may
            # already have all 1000 events and have closed the watch.
            interrupt_and_wait_for_resume()
            server.put_many([(key(f"o{batch}-{i}"), doc(str(i))) for i in range(50)])

    def interrupt_and_wait_for_resume() -> None:
        calls = server.calls["Watch"]
        wait_until(lambda: server.watch_count >= 1, what="a watch stream")
        if mode == "drop":
            server.drop_watches()
        else:
            server.end_watches()
        wait_until(lambda: server.calls["Watch"] > calls, what="the watch to resume")

    thread = threading.Thread(target=writer)
    seen: list[StoreWatchEvent] = []
    async with connect(server) as client:
        watch = client.watch(PREFIX, since=start, timeout=40)
        thread.start()
        try:
            async for event in watch:
                if event.type != "bookmark":
                    seen.append(event)
                if len(seen) == 1000:
                    break
        finally:
            await watch.aclose()
            await run_blocking(thread.join)
    assert [e.resource_version for e in seen] == list(range(start + 1, start + 1001))
    assert all(e.type == "added" for e in seen)
    assert [e.key.name for e in seen[:2] if e.key] == ["o0-0", "o0-1"]
    assert watch.state.streams >= 20


@run_async  # async-only
async def test_watch_relists_after_410_and_converges(server: ResourceStoreServer) -> None:
    server.put_many([(key(f"a{i}"), doc(str(i))) for i in range(10)])
    view: dict[str, StoredObject | None] = {}

    def apply(event: StoreWatchEvent) -> None:
        assert event.key is not None
        if event.type == "deleted":
            del view[event.key.name]
        else:
            assert event.value is not None
            view[event.key.name] = StoredObject(event.resource_version, event.value)

    async with connect(server) as client:
        async with client.watch(PREFIX, send_initial_events=True, timeout=30) as watch:
            async for event in watch:
                if event.type == "bookmark":
                    assert event.initial_events_end
                    break
                apply(event)
            assert len(view) == 10
            # The stream breaks and, before the watch resumes (it resumes when the
            # consumer asks for more), the history moves past its version.
            server.drop_watches()
            server.put(key("a1"), doc("changed"))
            server.remove(key("a2"))
            server.put(key("a10"), doc("new"))
            server.compact()
            tail: list[StoreWatchEvent] = []
            async for event in watch:
                tail.append(event)
                if event.type == "resynced":
                    break
                apply(event)
        assert {(e.type, e.key.name) for e in tail[:-1] if e.key} == {
            ("modified", "a1"),
            ("deleted", "a2"),
            ("added", "a10"),
        }
        deleted = next(e for e in tail if e.type == "deleted")
        assert deleted.previous is not None
        assert deleted.value is None
        assert tail[-1].resource_version == server.resource_version
        assert watch.state.resyncs == 1
        current = {o.key.name: o.value async for o in client.list(PREFIX)}
    assert {name: obj.value for name, obj in view.items() if obj} == current


@pytest.mark.parametrize("as_details", [False, True], ids=["error-event", "status-details"])
@run_async  # async-only
async def test_watch_since_too_old_relists(server: ResourceStoreServer, as_details: bool) -> None:
    server.errors_as_details = as_details
    rv = server.put(key("a"), doc())
    server.put(key("b"), doc())
    server.compact()
    async with connect(server) as client, client.watch(PREFIX, since=rv, timeout=20) as watch:
        first = [await watch.__anext__(), await watch.__anext__()]
    assert [(e.type, e.key.name if e.key else "") for e in first] == [
        ("added", "a"),
        ("added", "b"),
    ]


@run_async  # async-only
async def test_watch_since_an_old_version_lists_again_and_says_resynced(
    server: ResourceStoreServer,
) -> None:
    server.put_many([(key(f"o{i:03}"), doc(str(i))) for i in range(60)])
    async with connect(server) as client:
        async with client.watch(PREFIX, send_initial_events=True, timeout=20) as watch:
            names = []
            async for event in watch:
                if event.initial_events_end:
                    break
                names.append(event.key.name if event.key else "")
        assert names == [f"o{i:03}" for i in range(60)]

        old = server.resource_version
        server.put(key("late"), doc())
        server.compact()
        async with client.watch(PREFIX, since=old - 1, timeout=20) as watch:
            kinds = [(await watch.__anext__()).type for _ in range(62)]  # 61 added + resynced
            assert kinds[-1] == "resynced"
            assert watch.state.resyncs == 1


@pytest.mark.parametrize("as_details", [False, True], ids=["error-event", "status-details"])
@run_async  # async-only
async def test_watch_raises_non_retryable_errors(
    server: ResourceStoreServer, as_details: bool
) -> None:
    server.errors_as_details = as_details
    server.fail_next(1, 400, methods=["Watch"])
    async with connect(server) as client:
        watch = client.watch(PREFIX, since=1)
        with pytest.raises(BadRequestError) as err:
            await watch.__anext__()
        await watch.aclose()
    assert err.value.code == 400


@run_async  # async-only
async def test_watch_from_now_with_selector_bookmarks_and_deletes(
    server: ResourceStoreServer,
) -> None:
    server.put(key("x"), doc(app="web"))
    server.put(key("y"), doc(app="db"))
    results: list[tuple[str, str]] = []
    failures: list[BaseException] = []

    async def consume() -> None:
        try:
            for _ in range(5):
                e = await watch.__anext__()
                results.append((e.type, e.key.name if e.key else str(e.resource_version)))
        except BaseException as exc:
            failures.append(exc)
            raise

    async with (
        connect(server) as client,
        client.watch(PREFIX, labels="app=web", timeout=20) as watch,
    ):
        consumer = spawn(consume, name="consume")
        await run_blocking(lambda: server.wait_for_watchers(1))
        server.put(key("y"), doc("now web", app="web"))  # enters the selection: added
        server.put(key("x"), doc("moved", app="db"))  # leaves it: deleted
        server.put(key("z"), doc(app="db"))  # never selected: nothing
        server.put(key("y"), doc("again", app="web"))  # modified
        server.remove(key("y"))  # deleted
        server.put(key("z"), doc("still", app="db"))  # filtered out; the bookmark moves past it
        server.send_bookmarks()
        await consumer.join(10)
    assert not failures
    assert results == [
        ("added", "y"),
        ("deleted", "x"),
        ("modified", "y"),
        ("deleted", "y"),
        ("bookmark", str(server.resource_version)),
    ]
    assert watch.resource_version == server.resource_version


@run_async  # async-only
async def test_watch_restarted_during_initial_events_does_not_repeat(
    server: ResourceStoreServer,
) -> None:
    server.put_many([(key(f"a{i:03}"), doc()) for i in range(100)])
    server.initial_event_delay = 0.001  # the stream is surely mid-way when it drops
    async with (
        connect(server) as client,
        client.watch(PREFIX, send_initial_events=True, timeout=20) as watch,
    ):
        got = [await watch.__anext__() for _ in range(5)]
        server.remove(key("a099"))
        server.put(key("a000"), doc("changed"))
        server.drop_watches()
        async for event in watch:
            got.append(event)
            if event.type == "bookmark":
                break
    assert watch.state.streams == 2
    added = [e.key.name for e in got if e.type == "added" and e.key]
    assert added == [f"a{i:03}" for i in range(99)]  # each once, a099 never
    assert [(e.type, e.key.name) for e in got if e.type == "modified" and e.key] == [
        ("modified", "a000")
    ]
    assert got[-1].initial_events_end


@run_async  # async-only
async def test_closing_a_watch_ends_a_waiting_iteration(server: ResourceStoreServer) -> None:
    server.put(key("x"), doc())  # since=1 must not be ahead of the server
    ended: list[str] = []

    async def consume() -> None:
        async for event in watch:
            ended.append(event.type)
        ended.append("end")

    async with connect(server) as client:
        watch = client.watch(PREFIX, since=1)
        consumer = spawn(consume, name="consume")
        await run_blocking(lambda: server.wait_for_watchers(1))
        await watch.aclose()
        await consumer.join(10)
    assert ended == ["end"]


@run_async  # async-only
async def test_a_watch_timeout_ends_the_iteration(server: ResourceStoreServer) -> None:
    server.put(key("x"), doc())
    async with connect(server) as client:
        watch = client.watch(PREFIX, since=1, timeout=0.2)
        assert [e.type async for e in watch] == []


@run_async  # async-only
async def test_closing_the_client_ends_a_watch_with_a_clear_error(
    server: ResourceStoreServer,
) -> None:
    server.put(key("x"), doc())  # since=1 must not be ahead of the server
    client = AsyncResourceStoreClient(server.address, retry=FAST)
    watch = client.watch(PREFIX, since=1)
    errors: list[BaseException] = []

    async def consume() -> None:
        try:
            await watch.__anext__()
        except Exception as exc:
            errors.append(exc)

    consumer = spawn(consume, name="consume")
    await run_blocking(lambda: server.wait_for_watchers(1))
    await client.aclose()
    await consumer.join(10)
    assert len(errors) == 1
    assert isinstance(errors[0], ClientClosedError)


# ---------------------------------------------------------------- servers and threads


@run_async  # async-only
async def test_file_database_survives_a_restart(tmp_path: Path) -> None:
    db = str(tmp_path / "store.sqlite")
    with ResourceStoreServer(db) as first:
        client = AsyncResourceStoreClient(first.address)
        async with client:
            rv = await client.create(key("a"), doc("A"))
            await client.update(key("a"), doc("B"), resource_version=rv)
    with ResourceStoreServer(db) as second:
        client = AsyncResourceStoreClient(second.address)
        async with client:
            obj = await client.read(key("a"))
            assert obj.json()["spec"]["title"] == "B"
            assert (await client.read(key("a"), resource_version=rv)).json()["spec"]["title"] == "A"
            assert await client.create(key("b"), doc()) == obj.resource_version + 1


@run_async  # async-only
async def test_server_and_client_leave_no_threads_behind() -> None:
    before = {t.ident for t in threading.enumerate()}
    with ResourceStoreServer() as srv:
        client = AsyncResourceStoreClient(srv.address, retry=FAST)
        async with client:
            await client.create(key("a"), doc())
            async with client.watch(PREFIX, since=1) as watch:
                srv.put(key("b"), doc())
                assert (await watch.__anext__()).type == "added"
            async with client.informer(PREFIX, resync_period=60) as informer:
                await informer.wait_synced(10)
    await run_blocking(
        until(
            lambda: (
                not [
                    t
                    for t in threading.enumerate()
                    if t.ident not in before
                    and t.name.startswith(("resource-store", "store-informer"))
                ]
            ),
            "server and informer threads to end",
        )
    )
