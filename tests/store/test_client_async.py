"""AsyncResourceStoreClient against the in-process server: the twin of test_client_sync."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import grpc
import pytest

from xds_client.errors import ClientClosedError
from xds_client.store import (
    AlreadyExistsError,
    AsyncResourceStoreClient,
    BadRequestError,
    ConflictError,
    ExpiredError,
    InvalidError,
    NotFoundError,
    StoreWatchEvent,
    TooManyRequestsError,
    UnavailableError,
)
from xds_client.testing import ResourceStoreServer

from ._store_support import FAST, PREFIX, doc, key, wait_until

pytestmark = pytest.mark.timeout(60)

_T = TypeVar("_T")


@pytest.fixture
def server() -> Iterator[ResourceStoreServer]:
    with ResourceStoreServer() as srv:
        yield srv


def run(
    server: ResourceStoreServer,
    body: Callable[[AsyncResourceStoreClient], Awaitable[_T]],
    timeout: float = 40,
) -> _T:
    """Run ``body`` with a fresh async client in a new loop, bounded in time."""

    async def main() -> _T:
        async with AsyncResourceStoreClient(server.address, retry=FAST, timeout=10) as client:
            return await asyncio.wait_for(body(client), timeout)

    return asyncio.run(main())


async def to_thread(fn: Callable[[], _T]) -> _T:
    return await asyncio.get_running_loop().run_in_executor(None, fn)


@pytest.mark.parametrize("as_details", [False, True], ids=["in-response", "in-details"])
def test_crud_and_typed_errors(server: ResourceStoreServer, as_details: bool) -> None:
    server.errors_as_details = as_details

    async def body(client: AsyncResourceStoreClient) -> None:
        k = key("a")
        rv = await client.create(k, {"spec": {"title": "A"}})
        obj = await client.read(k)
        assert obj.resource_version == rv
        assert obj.json()["spec"] == {"title": "A"}
        with pytest.raises(AlreadyExistsError):
            await client.create(k, doc())
        rv2 = await client.update(k, doc("B"), resource_version=rv)
        with pytest.raises(ConflictError):
            await client.update(k, doc("C"), resource_version=rv)
        with pytest.raises(NotFoundError) as missing:
            await client.read(key("nope"))
        assert missing.value.details.name == "nope"
        with pytest.raises(InvalidError):
            await client.create(key("b"), {"metadata": {"name": "other"}})
        assert await client.delete(k, resource_version=rv2) > rv2
        assert await client.is_healthy()

    run(server, body)


def test_retries_and_429(server: ResourceStoreServer) -> None:
    delays: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        delays.append(seconds)

    async def body(client: AsyncResourceStoreClient) -> None:
        client._sleep = fake_sleep
        await client.create(key("a"), doc())
        server.fail_next(2, grpc.StatusCode.UNAVAILABLE)
        assert (await client.read(key("a"))).key.name == "a"
        assert server.calls["Read"] == 3
        server.fail_next(1, grpc.StatusCode.UNAVAILABLE)
        with pytest.raises(UnavailableError):
            await client.create(key("b"), doc())
        assert server.calls["Create"] == 2
        delays.clear()
        server.fail_next(2, 429, retry_after=2)
        await client.create(key("b"), doc())
        assert delays == [2.0, 2.0]
        server.fail_next(10, 429)
        with pytest.raises(TooManyRequestsError):
            await client.delete(key("b"))

    run(server, body)


def test_read_modify_write_and_close(server: ResourceStoreServer) -> None:
    async def body(client: AsyncResourceStoreClient) -> None:
        k = key("counter")
        await client.create(k, {"spec": {"n": 0}})
        calls = 0

        def bump(obj: dict[str, dict[str, int]]) -> dict[str, object]:
            nonlocal calls
            calls += 1
            if calls == 1:
                server.put(k, {"spec": {"n": 100}})
            return {"spec": {"n": obj["spec"]["n"] + 1}}

        await client.read_modify_write(k, bump)
        assert (await client.read(k)).json()["spec"]["n"] == 101
        await client.aclose()
        with pytest.raises(ClientClosedError):
            await client.read(k)

    run(server, body)


def test_list_pages_with_concurrent_writes(server: ResourceStoreServer) -> None:
    server.put_many(
        [(key(f"o{i:05}"), doc(str(i), app="web" if i % 2 else "db")) for i in range(10_000)]
    )

    async def body(client: AsyncResourceStoreClient) -> None:
        snapshot = {o.key.name: o.value async for o in client.list(PREFIX, limit=5000)}
        it = client.list(PREFIX, limit=500)
        first = await it.__anext__()

        def writer() -> None:
            for i in range(300):
                server.put(key(f"o{(i * 7919) % 10_000:05}"), doc("changed"))
                server.remove(key(f"o{(i * 31 + 5) % 10_000:05}"))

        write = to_thread(writer)
        listed = [first] + [o async for o in it]
        await write
        assert it.pages == 20
        assert {o.key.name: o.value for o in listed} == snapshot

        server.filter_labels = False  # the client filters on its own
        web = [o.key.name async for o in client.list(PREFIX, labels="app=web", limit=700)]
        expected = [
            o.key.name
            async for o in client.list(PREFIX, limit=5000)
            if o.labels.get("app") == "web"
        ]
        assert web == expected
        assert len(web) > 4000
        page = await client.list_page(PREFIX, limit=3)
        server.put(key("late"), doc())
        server.compact()
        with pytest.raises(ExpiredError):
            await client.list_page(PREFIX, limit=3, page_token=page.next_page_token)

    run(server, body)


@pytest.mark.parametrize("mode", ["drop", "end"])
def test_watch_survives_20_interruptions_without_loss_or_repeat(
    server: ResourceStoreServer, mode: str
) -> None:
    start = server.put(key("seed"), doc())

    def writer() -> None:
        for batch in range(20):
            server.put_many([(key(f"o{batch}-{i}"), doc(str(i))) for i in range(50)])
            calls = server.calls["Watch"]
            wait_until(lambda: server.watch_count >= 1, what="a watch stream")
            if mode == "drop":
                server.drop_watches()
            else:
                server.end_watches()
            resumed(calls)

    def resumed(calls: int) -> None:
        wait_until(lambda: server.calls["Watch"] > calls, what="the watch to resume")

    async def body(client: AsyncResourceStoreClient) -> list[StoreWatchEvent]:
        seen: list[StoreWatchEvent] = []
        thread = threading.Thread(target=writer)
        async with client.watch(PREFIX, since=start) as watch:
            thread.start()
            try:
                async for event in watch:
                    if event.type != "bookmark":
                        seen.append(event)
                    if len(seen) == 1000:
                        break
            finally:
                await to_thread(thread.join)
            assert watch.state.streams >= 20
        return seen

    seen = run(server, body)
    assert [e.resource_version for e in seen] == list(range(start + 1, start + 1001))
    assert all(e.type == "added" for e in seen)


def test_watch_relists_after_410_and_converges(server: ResourceStoreServer) -> None:
    server.put_many([(key(f"a{i}"), doc(str(i))) for i in range(10)])

    async def body(client: AsyncResourceStoreClient) -> None:
        view: dict[str, bytes] = {}
        async with client.watch(PREFIX, send_initial_events=True) as watch:
            tail: list[StoreWatchEvent] = []
            initial_done = False
            async for event in watch:
                if event.type == "bookmark" and event.initial_events_end:
                    initial_done = True
                    server.drop_watches()
                    server.put(key("a1"), doc("changed"))
                    server.remove(key("a2"))
                    server.put(key("a10"), doc("new"))
                    server.compact()
                    continue
                if initial_done:
                    tail.append(event)
                if event.type == "resynced":
                    break
                assert event.key is not None
                if event.type == "deleted":
                    del view[event.key.name]
                else:
                    assert event.value is not None
                    view[event.key.name] = event.value
            assert watch.state.resyncs == 1
        assert {(e.type, e.key.name) for e in tail if e.key} == {
            ("modified", "a1"),
            ("deleted", "a2"),
            ("added", "a10"),
        }
        assert view == {o.key.name: o.value async for o in client.list(PREFIX)}

    run(server, body)


def test_watch_selector_and_errors(server: ResourceStoreServer) -> None:
    server.put(key("x"), doc(app="web"))

    async def body(client: AsyncResourceStoreClient) -> None:
        got: list[tuple[str, str]] = []
        async with client.watch(PREFIX, labels="app=web") as watch:

            async def consume() -> None:
                async for e in watch:
                    got.append((e.type, e.key.name if e.key else ""))
                    if len(got) == 3:
                        return

            task = asyncio.ensure_future(consume())
            await to_thread(server.wait_for_watchers)
            server.put(key("y"), doc(app="web"))
            server.put(key("x"), doc(app="db"))
            server.put(key("z"), doc(app="db"))
            server.remove(key("y"))
            await task
        assert got == [("added", "y"), ("deleted", "x"), ("deleted", "y")]

        server.fail_next(1, 400, methods=["Watch"])
        async with client.watch(PREFIX, since=1) as failing:
            with pytest.raises(BadRequestError):
                await failing.__anext__()

    run(server, body)


def test_watch_closes_while_waiting(server: ResourceStoreServer) -> None:
    server.put(key("x"), doc())  # since=1 must not be ahead of the server

    async def body(client: AsyncResourceStoreClient) -> None:
        watch = client.watch(PREFIX, since=1)
        task = asyncio.ensure_future(watch.__anext__())
        await to_thread(server.wait_for_watchers)
        await watch.aclose()
        with pytest.raises(StopAsyncIteration):
            await task

    run(server, body)


def test_informer(server: ResourceStoreServer) -> None:
    server.put_many([(key(f"a{i}"), doc(str(i))) for i in range(5)])
    log: list[tuple[str, str]] = []

    async def body(client: AsyncResourceStoreClient) -> None:
        informer = client.informer(
            PREFIX,
            on_add=lambda o: log.append(("add", o.key.name)),
            on_update=lambda old, new: log.append(("update", new.key.name)),
            on_delete=lambda o: log.append(("delete", o.key.name)),
        )
        async with informer:
            await informer.wait_synced(10)
            assert len(informer.objects) == 5
            await client.update(key("a1"), doc("changed"), resource_version=0)
            await client.delete(key("a2"))
            await client.create(key("a9"), doc())
            for _ in range(1000):
                if ("add", "a9") in log:
                    break
                await asyncio.sleep(0.005)
            assert informer.get(key("a2")) is None

    run(server, body)
    assert log[5:] == [("update", "a1"), ("delete", "a2"), ("add", "a9")]


def test_pages_initial_events_and_old_versions(server: ResourceStoreServer) -> None:
    server.put_many([(key(f"o{i:03}"), doc(str(i))) for i in range(60)])

    async def body(client: AsyncResourceStoreClient) -> None:
        page = await client.list_page(PREFIX, limit=0)
        assert len(page.items) == 50
        rest = await client.list_page(PREFIX, page_token=page.next_page_token)
        assert (len(rest.items), rest.next_page_token) == (10, "")
        it = client.list(PREFIX, limit=25)
        assert len([o async for o in it]) == 60
        assert (it.pages, it.resource_version) == (3, server.resource_version)

        async with client.watch(PREFIX, send_initial_events=True) as watch:
            names = []
            async for event in watch:
                if event.initial_events_end:
                    break
                names.append(event.key.name if event.key else "")
        assert names == [f"o{i:03}" for i in range(60)]

        old = server.resource_version
        server.put(key("late"), doc())
        server.compact()
        async with client.watch(PREFIX, since=old - 1) as watch:
            kinds = [(await watch.__anext__()).type for _ in range(62)]  # 61 added + resynced
            assert kinds[-1] == "resynced"
            assert watch.state.resyncs == 1

    run(server, body)


def test_unreachable_server() -> None:
    async def main() -> None:
        retry = FAST.with_max_attempts(2).with_deadline(None)
        async with AsyncResourceStoreClient("127.0.0.1:1", timeout=2, retry=retry) as client:
            assert await client.is_healthy() is False
            with pytest.raises(UnavailableError):
                await client.read(key("a"))

    asyncio.run(main())
