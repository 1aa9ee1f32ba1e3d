"""ResourceStoreClient against the in-process SQLite ResourceStoreServer."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from xds_client.errors import ClientClosedError, UsageError
from xds_client.store import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    ExpiredError,
    ForbiddenError,
    InternalError,
    InvalidError,
    NotFoundError,
    ResourceKey,
    ResourceStoreClient,
    StoredObject,
    StoreNotImplementedError,
    StoreWatchEvent,
    TooManyRequestsError,
    UnauthorizedError,
    UnavailableError,
)
from xds_client.testing import ResourceStoreServer

from ._store_support import FAST, PREFIX, doc, key, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server() -> Iterator[ResourceStoreServer]:
    with ResourceStoreServer() as srv:
        yield srv


@pytest.fixture
def client(server: ResourceStoreServer) -> Iterator[ResourceStoreClient]:
    with ResourceStoreClient(server.address, retry=FAST, timeout=10) as c:
        yield c


class Sleeps:
    """A fake sleep that records delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


# ---------------------------------------------------------------- CRUD and errors


@pytest.mark.parametrize("as_details", [False, True], ids=["in-response", "in-details"])
def test_crud_and_typed_errors(
    server: ResourceStoreServer, client: ResourceStoreClient, as_details: bool
) -> None:
    server.errors_as_details = as_details
    k = key("a")
    rv = client.create(k, {"spec": {"title": "A"}})
    obj = client.read(k)
    assert obj.resource_version == rv
    assert obj.key == k
    assert obj.json()["spec"] == {"title": "A"}
    assert obj.json()["metadata"]["name"] == "a"
    assert json.loads(obj.value)["metadata"]["namespace"] == "default"

    with pytest.raises(AlreadyExistsError) as exists:
        client.create(k, b'{"spec": {}}')
    assert exists.value.code == 409
    assert exists.value.reason == "AlreadyExists"
    assert isinstance(exists.value, ConflictError)
    assert (exists.value.grpc_code is not None) is as_details

    rv2 = client.update(k, {"spec": {"title": "B"}}, resource_version=rv)
    assert rv2 > rv
    with pytest.raises(ConflictError) as stale:
        client.update(k, {"spec": {}}, resource_version=rv)
    assert stale.value.code == 409
    assert not isinstance(stale.value, AlreadyExistsError)
    with pytest.raises(ConflictError):
        client.delete(k, resource_version=rv)

    with pytest.raises(NotFoundError) as missing:
        client.read(key("nope"))
    assert missing.value.code == 404
    assert missing.value.details.name == "nope"
    assert missing.value.details.group == PREFIX.group

    with pytest.raises(InvalidError) as invalid:
        client.create(key("b"), {"metadata": {"name": "other", "labels": {"x": 1}}})
    fields = {c.field for c in invalid.value.causes}
    assert fields == {"metadata.name", "metadata.labels"}
    assert "metadata.name" in str(invalid.value)

    assert client.read(k, resource_version=rv).json()["spec"] == {"title": "A"}
    rv3 = client.delete(k, resource_version=rv2)
    assert rv3 > rv2
    with pytest.raises(NotFoundError):
        client.read(k)
    with pytest.raises(NotFoundError):
        client.delete(k)


def test_update_with_version_zero_is_unconditional(client: ResourceStoreClient) -> None:
    k = key("a")
    client.create(k, doc("A"))
    client.update(k, doc("B"), resource_version=0)
    assert client.read(k).json()["spec"]["title"] == "B"


def test_usage_errors_and_close(server: ResourceStoreServer) -> None:
    client = ResourceStoreClient(server.address)
    with pytest.raises(UsageError):
        client.create(PREFIX, doc())
    with pytest.raises(UsageError):
        client.create(key("a"), ["not", "a", "mapping"])  # type: ignore[arg-type]
    assert client.is_healthy()
    client.close()
    with pytest.raises(ClientClosedError):
        client.read(key("a"))


def test_delete_with_uid_precondition(client: ResourceStoreClient) -> None:
    k = key("a")
    client.create(k, doc())
    uid = client.read(k).json()["metadata"]["uid"]
    with pytest.raises(ConflictError):
        client.delete(k, uid="wrong")
    client.delete(k, uid=uid)


def test_unreachable_server_is_unhealthy_and_reads_retry() -> None:
    client = ResourceStoreClient(
        "127.0.0.1:1", timeout=2, retry=FAST.with_max_attempts(3).with_deadline(None)
    )
    sleeps = Sleeps()
    client._sleep = sleeps
    try:
        assert client.is_healthy() is False
        assert len(sleeps.delays) == 2  # is_healthy retries as reads do
        sleeps.delays.clear()
        with pytest.raises(UnavailableError):
            client.read(key("a"))
        assert len(sleeps.delays) == 2
        # A write whose connection never came up surely did not reach a server: retried too.
        sleeps.delays.clear()
        with pytest.raises(UnavailableError):
            client.create(key("a"), doc())
        assert len(sleeps.delays) == 2
    finally:
        client.close()


# ---------------------------------------------------------------- retries


def test_reads_retry_on_unavailable(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    client.create(key("a"), doc())
    server.fail_next(2, grpc.StatusCode.UNAVAILABLE)
    assert client.read(key("a")).key.name == "a"
    assert server.calls["Read"] == 3
    server.fail_next(2, grpc.StatusCode.RESOURCE_EXHAUSTED, methods=["List"])
    assert [o.key.name for o in client.list(PREFIX)] == ["a"]


def test_writes_do_not_retry_when_the_server_may_have_acted(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    server.fail_next(1, grpc.StatusCode.UNAVAILABLE)
    with pytest.raises(UnavailableError) as err:
        client.create(key("a"), doc())
    assert err.value.grpc_code == grpc.StatusCode.UNAVAILABLE
    assert err.value.code == 503
    assert server.calls["Create"] == 1


@pytest.mark.parametrize("as_details", [False, True], ids=["in-response", "in-details"])
def test_429_retries_writes_and_honours_retry_after(
    server: ResourceStoreServer, client: ResourceStoreClient, as_details: bool
) -> None:
    server.errors_as_details = as_details
    sleeps = Sleeps()
    client._sleep = sleeps
    server.fail_next(2, 429, retry_after=3)
    assert client.create(key("a"), doc()) > 0
    assert server.calls["Create"] == 3
    assert sleeps.delays == [3.0, 3.0]

    server.fail_next(10, 429)
    with pytest.raises(TooManyRequestsError) as err:
        client.update(key("a"), doc("x"), resource_version=0)
    assert err.value.code == 429
    assert server.calls["Update"] == FAST.max_attempts


def test_grpc_codes_map_to_http_codes(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
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
    for code, cls, http in cases:
        server.fail_next(1, code)
        with pytest.raises(cls) as err:
            client.read(key("a"))
        assert getattr(err.value, "code", None) == http


def test_read_modify_write_retries_on_conflict(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    k = key("counter")
    client.create(k, {"spec": {"n": 0}})
    calls = 0

    def bump(obj: dict[str, object]) -> dict[str, object]:
        nonlocal calls
        calls += 1
        if calls == 1:  # someone else writes between our read and our update
            server.put(k, {"spec": {"n": 100}})
        spec = obj["spec"]
        assert isinstance(spec, dict)
        return {"spec": {"n": spec["n"] + 1}}

    client.read_modify_write(k, bump)
    assert calls == 2
    assert client.read(k).json()["spec"]["n"] == 101


# ---------------------------------------------------------------- list


def test_list_pages_follow_tokens_and_filter_labels(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    server.put_many(
        [
            (key(f"o{i:03}"), doc(str(i), app="web" if i % 2 else "db", tier="abc"[i % 3]))
            for i in range(100)
        ]
    )
    server.put(key("legacy"), doc("l", app="web", tier="a", legacy="yes"))
    it = client.list(PREFIX, limit=7)
    names = [o.key.name for o in it]
    assert len(names) == 101
    assert names == sorted(names)
    assert it.pages == 15
    assert it.resource_version == server.resource_version

    selector = "app=web,tier in (a,b),!legacy"
    want = [f"o{i:03}" for i in range(100) if i % 2 and i % 3 in (0, 1)]
    for server_filters in (True, False):
        server.filter_labels = server_filters
        it = client.list(PREFIX, labels=selector, limit=10)
        assert [o.key.name for o in it] == want
        assert it.pages == 11  # short pages still carry a token

    page = client.list_page(PREFIX, limit=40)
    assert len(page.items) == 40
    assert page.next_page_token
    page2 = client.list_page(PREFIX, limit=40, page_token=page.next_page_token)
    assert page2.items[0].key.name == "o039"  # "legacy" sorts first
    assert page2.resource_version == page.resource_version


def test_list_reads_the_next_page_ahead_and_retries_it(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    server.put_many([(key(f"o{i:03}"), doc(str(i))) for i in range(30)])
    it = client.list(PREFIX, limit=10)
    first = next(it)
    assert first.key.name == "o000"
    # The second page was requested while the first is handed out; a failure of a
    # page requested ahead goes through the ordinary call and its retries.
    server.fail_next(2, grpc.StatusCode.UNAVAILABLE, methods=["List"])
    names = [first.key.name, *(o.key.name for o in it)]
    assert names == [f"o{i:03}" for i in range(30)]
    assert it.pages == 3
    # Stopping early leaves nothing waiting: the client closes cleanly.
    early = client.list(PREFIX, limit=10)
    assert next(early).key.name == "o000"
    del early


def test_list_of_10000_items_is_pinned_while_others_write(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    server.put_many([(key(f"o{i:05}"), doc(str(i))) for i in range(10_000)])
    snapshot = {o.key.name: (o.resource_version, o.value) for o in client.list(PREFIX, limit=5000)}
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

    it = client.list(PREFIX, limit=500)
    first = next(it)
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        listed = [first, *it]
    finally:
        stop.set()
        thread.join()
    assert writes > 0
    assert it.pages == 20
    assert it.resource_version == max(rv for rv, _ in snapshot.values())
    assert {o.key.name: (o.resource_version, o.value) for o in listed} == snapshot
    assert [o.key.name for o in listed] == sorted(snapshot)


def test_expired_page_token(server: ResourceStoreServer, client: ResourceStoreClient) -> None:
    server.put_many([(key(f"o{i}"), doc()) for i in range(10)])
    page = client.list_page(PREFIX, limit=3)
    server.put(key("o1"), doc("changed"))
    server.compact()
    with pytest.raises(ExpiredError) as err:
        client.list_page(PREFIX, limit=3, page_token=page.next_page_token)
    assert err.value.code == 410


# ---------------------------------------------------------------- watch


def _closer(watch: object, seconds: float) -> threading.Timer:
    """Close a watch after ``seconds`` so a broken test fails instead of hanging."""
    timer = threading.Timer(seconds, watch.close)  # type: ignore[attr-defined]
    timer.daemon = True
    timer.start()
    return timer


@pytest.mark.parametrize("mode", ["drop", "end"])
def test_watch_survives_20_interruptions_without_loss_or_repeat(
    server: ResourceStoreServer, client: ResourceStoreClient, mode: str
) -> None:
    start = server.put(key("seed"), doc())
    watch = client.watch(PREFIX, since=start)
    written: list[int] = []

    def writer() -> None:
        for batch in range(20):
            # Before each batch, not after: after the last one the consumer may
            # already have all 1000 events and have closed the watch.
            interrupt_and_wait_for_resume()
            written.append(
                server.put_many([(key(f"o{batch}-{i}"), doc(str(i))) for i in range(50)])
            )

    def interrupt_and_wait_for_resume() -> None:
        calls = server.calls["Watch"]
        wait_until(lambda: server.watch_count >= 1, what="a watch stream")
        if mode == "drop":
            server.drop_watches()
        else:
            server.end_watches()
        wait_until(lambda: server.calls["Watch"] > calls, what="the watch to resume")

    thread = threading.Thread(target=writer)
    timer = _closer(watch, 40)
    thread.start()
    seen: list[StoreWatchEvent] = []
    try:
        for event in watch:
            if event.type != "bookmark":
                seen.append(event)
            if len(seen) == 1000:
                break
    finally:
        watch.close()
        timer.cancel()
        thread.join()
    assert [e.resource_version for e in seen] == list(range(start + 1, start + 1001))
    assert all(e.type == "added" for e in seen)
    assert [e.key.name for e in seen[:2] if e.key] == ["o0-0", "o0-1"]
    assert watch.state.streams >= 20


def test_watch_relists_after_410_and_converges(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    server.put_many([(key(f"a{i}"), doc(str(i))) for i in range(10)])
    watch = client.watch(PREFIX, send_initial_events=True)
    timer = _closer(watch, 30)
    view: dict[str, StoredObject | None] = {}

    def apply(event: StoreWatchEvent) -> None:
        assert event.key is not None
        if event.type == "deleted":
            del view[event.key.name]
        else:
            assert event.value is not None
            view[event.key.name] = StoredObject(event.resource_version, event.value)

    try:
        events = iter(watch)
        for event in events:
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
        for event in events:
            tail.append(event)
            if event.type == "resynced":
                break
            apply(event)
    finally:
        watch.close()
        timer.cancel()
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
    current = {o.key.name: o.value for o in client.list(PREFIX)}
    assert {name: obj.value for name, obj in view.items() if obj} == current


@pytest.mark.parametrize("as_details", [False, True], ids=["error-event", "status-details"])
def test_watch_since_too_old_relists(
    server: ResourceStoreServer, client: ResourceStoreClient, as_details: bool
) -> None:
    server.errors_as_details = as_details
    rv = server.put(key("a"), doc())
    server.put(key("b"), doc())
    server.compact()
    with client.watch(PREFIX, since=rv) as watch:
        timer = _closer(watch, 20)
        first = [next(watch), next(watch)]
        timer.cancel()
    assert [(e.type, e.key.name if e.key else "") for e in first] == [
        ("added", "a"),
        ("added", "b"),
    ]


@pytest.mark.parametrize("as_details", [False, True], ids=["error-event", "status-details"])
def test_watch_raises_non_retryable_errors(
    server: ResourceStoreServer, client: ResourceStoreClient, as_details: bool
) -> None:
    server.errors_as_details = as_details
    server.fail_next(1, 400, methods=["Watch"])
    with client.watch(PREFIX, since=1) as watch, pytest.raises(BadRequestError) as err:
        next(watch)
    assert err.value.code == 400


def test_watch_from_now_with_selector_bookmarks_and_deletes(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    server.put(key("x"), doc(app="web"))
    server.put(key("y"), doc(app="db"))
    watch = client.watch(PREFIX, labels="app=web")
    timer = _closer(watch, 20)
    try:
        wait_until(lambda: server.watch_count >= 1 or watch.state.step.value == "anchor")
        it = iter(watch)

        def step() -> StoreWatchEvent:
            return next(it)

        results: list[tuple[str, str]] = []

        def consume() -> None:
            for _ in range(5):
                e = step()
                results.append((e.type, e.key.name if e.key else str(e.resource_version)))

        thread = threading.Thread(target=consume)
        thread.start()
        server.wait_for_watchers(1)
        server.put(key("y"), doc("now web", app="web"))  # enters the selection: added
        server.put(key("x"), doc("moved", app="db"))  # leaves it: deleted
        server.put(key("z"), doc(app="db"))  # never selected: nothing
        server.put(key("y"), doc("again", app="web"))  # modified
        server.remove(key("y"))  # deleted
        server.put(key("z"), doc("still", app="db"))  # filtered out; the bookmark moves past it
        server.send_bookmarks()
        thread.join(10)
    finally:
        watch.close()
        timer.cancel()
    assert results == [
        ("added", "y"),
        ("deleted", "x"),
        ("modified", "y"),
        ("deleted", "y"),
        ("bookmark", str(server.resource_version)),
    ]
    assert watch.resource_version == server.resource_version


def test_watch_restarted_during_initial_events_does_not_repeat(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    server.put_many([(key(f"a{i:03}"), doc()) for i in range(100)])
    server.initial_event_delay = 0.001  # the stream is surely mid-way when it drops
    watch = client.watch(PREFIX, send_initial_events=True)
    timer = _closer(watch, 20)
    try:
        got = [next(watch) for _ in range(5)]
        server.remove(key("a099"))
        server.put(key("a000"), doc("changed"))
        server.drop_watches()
        for event in watch:
            got.append(event)
            if event.type == "bookmark":
                break
    finally:
        watch.close()
        timer.cancel()
    assert watch.state.streams == 2
    added = [e.key.name for e in got if e.type == "added" and e.key]
    assert added == [f"a{i:03}" for i in range(99)]  # each once, a099 never
    assert [(e.type, e.key.name) for e in got if e.type == "modified" and e.key] == [
        ("modified", "a000")
    ]
    assert got[-1].initial_events_end


# ---------------------------------------------------------------- informer and loops


def test_informer_keeps_a_current_dict(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    server.put_many([(key(f"a{i}"), doc(str(i), app="web")) for i in range(5)])
    server.put(key("other"), doc(app="db"))
    log: list[tuple[str, str]] = []
    informer = client.informer(
        PREFIX,
        "app=web",
        on_add=lambda o: log.append(("add", o.key.name)),
        on_update=lambda old, new: log.append(("update", new.key.name)),
        on_delete=lambda o: log.append(("delete", o.key.name)),
    )
    with informer:
        informer.wait_synced(10)
        assert sorted(k.name for k in informer.objects) == [f"a{i}" for i in range(5)]
        client.update(key("a1"), doc("changed", app="web"), resource_version=0)
        client.delete(key("a2"))
        client.create(key("a9"), doc(app="web"))
        wait_until(lambda: ("add", "a9") in log, what="the informer to see a9")
        obj = informer.get(key("a1"))
        assert obj is not None
        assert obj.json()["spec"]["title"] == "changed"
        assert informer.get(key("a2")) is None
    assert log[5:] == [("update", "a1"), ("delete", "a2"), ("add", "a9")]


def test_sync_client_works_inside_a_running_event_loop(client: ResourceStoreClient) -> None:
    async def notebook_cell() -> list[str]:
        client.create(key("a"), doc())
        return [o.key.name for o in client.list(PREFIX)]

    assert asyncio.run(notebook_cell()) == ["a"]


def test_pytest_plugin_fixtures(resource_store_client: ResourceStoreClient) -> None:
    cluster_key = ResourceKey("dashboard.grafana.app", "dashboards", name="n")
    resource_store_client.create(cluster_key, doc())
    assert resource_store_client.read(cluster_key).resource_version == 1


def test_file_database_survives_a_restart(tmp_path: Path) -> None:
    db = str(tmp_path / "store.sqlite")
    with ResourceStoreServer(db) as first, ResourceStoreClient(first.address) as client:
        rv = client.create(key("a"), doc("A"))
        client.update(key("a"), doc("B"), resource_version=rv)
    with ResourceStoreServer(db) as second, ResourceStoreClient(second.address) as client:
        obj = client.read(key("a"))
        assert obj.json()["spec"]["title"] == "B"
        assert client.read(key("a"), resource_version=rv).json()["spec"]["title"] == "A"
        assert client.create(key("b"), doc()) == obj.resource_version + 1


def test_default_page_size_and_reads_at_a_version(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    server.put_many([(key(f"o{i:03}"), doc(str(i))) for i in range(60)])
    page = client.list_page(PREFIX, limit=0)
    assert len(page.items) == 50
    assert page.next_page_token
    rv = client.read(key("o001")).resource_version
    later = server.put(key("other"), doc())
    server.put(key("o001"), doc("changed"))
    # The version of the object as it was at `later` (unchanged since rv).
    old = client.read(key("o001"), resource_version=later)
    assert (old.resource_version, old.json()["spec"]["title"]) == (rv, "1")
    server.remove(key("o002"))
    with pytest.raises(NotFoundError):
        client.read(key("o002"), resource_version=server.resource_version)
    server.compact()
    assert client.read(key("o003"), resource_version=later).resource_version < later
    with pytest.raises(ExpiredError):
        client.read(key("o001"), resource_version=later)


def test_server_and_client_leave_no_threads_behind() -> None:
    before = {t.ident for t in threading.enumerate()}
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as client:
        client.create(key("a"), doc())
        with client.watch(PREFIX, since=1) as watch:
            srv.put(key("b"), doc())
            assert next(watch).type == "added"
        with client.informer(PREFIX) as informer:
            informer.wait_synced(10)
    wait_until(
        lambda: (
            not [
                t
                for t in threading.enumerate()
                if t.ident not in before and t.name.startswith(("resource-store", "store-informer"))
            ]
        ),
        what="server and informer threads to end",
    )


def test_closing_the_client_ends_a_watch_with_a_clear_error(server: ResourceStoreServer) -> None:
    server.put(key("x"), doc())  # since=1 must not be ahead of the server
    client = ResourceStoreClient(server.address, retry=FAST)
    watch = client.watch(PREFIX, since=1)
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            next(watch)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=consume)
    thread.start()
    server.wait_for_watchers(1)
    client.close()
    thread.join(10)
    assert len(errors) == 1
    assert isinstance(errors[0], ClientClosedError)
