"""The client in both dialects against both servers: ours (SQLite) and the Grafana-like one."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest

from tests._waiting import wait_until
from xds_client.store import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    Dialect,
    NotFoundError,
    ReflectorBackoff,
    ResourceStoreClient,
    UnauthorizedError,
)
from xds_client.testing import ResourceStoreServer

from ._grafana_like import GrafanaLikeServer
from ._store_support import FAST, PREFIX, doc, key

pytestmark = pytest.mark.timeout(60)

CASES = [
    ("sqlite", Dialect.GRAFANA),
    ("sqlite", Dialect.SEED),
    ("grafana-like", Dialect.GRAFANA),
    ("grafana-like", Dialect.SEED),
]


@pytest.fixture(params=CASES, ids=lambda c: f"{c[0]}-{c[1].value}")
def client(request: pytest.FixtureRequest) -> Iterator[ResourceStoreClient]:
    kind, dialect = request.param
    with contextlib.ExitStack() as stack:
        if kind == "sqlite":
            address = stack.enter_context(ResourceStoreServer(dialect=dialect)).address
        else:
            address = stack.enter_context(GrafanaLikeServer(dialect=dialect.value)).address
        yield stack.enter_context(
            ResourceStoreClient(address, retry=FAST, timeout=10, dialect=dialect)
        )


def test_crud_and_typed_errors(client: ResourceStoreClient) -> None:
    rv1 = client.create(key("a"), doc("one"))
    with pytest.raises(AlreadyExistsError):
        client.create(key("a"), doc("again"))
    rv2 = client.update(key("a"), doc("two"), resource_version=rv1)
    with pytest.raises(ConflictError):  # the Grafana-like one says "optimistic locking failed"
        client.update(key("a"), doc("stale"), resource_version=rv1)
    assert client.read(key("a"), resource_version=rv1).json()["spec"]["title"] == "one"
    assert client.read(key("a")).resource_version == rv2
    client.delete(key("a"))
    with pytest.raises(NotFoundError):
        client.read(key("a"))
    with pytest.raises(BadRequestError):
        client.create(key("not valid"), doc())


def test_read_modify_write_under_contention(client: ResourceStoreClient) -> None:
    client.create(key("n"), {"spec": {"n": 0}})

    def bump(d: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        d["spec"]["n"] += 1
        return d

    def worker() -> None:
        for _ in range(10):
            client.read_modify_write(key("n"), bump, max_attempts=200)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert client.read(key("n")).json()["spec"]["n"] == 40


def test_pages_of_large_objects_and_exact_lists(client: ResourceStoreClient) -> None:
    blob = "x" * 20_000
    for i in range(300):  # 6 MB: more than one 4 MiB message unless pages stop at 2 MiB
        client.create(key(f"o{i:03}"), {"spec": {"blob": blob}})
    listed = client.list(PREFIX)
    assert sum(1 for _ in listed) == 300
    assert listed.pages >= 3
    then = listed.resource_version
    client.delete(key("o000"))
    exact = client.list(PREFIX, resource_version=then, exact=True, limit=100)
    assert sum(1 for _ in exact) == 300
    assert sum(1 for _ in client.list(PREFIX)) == 299


def test_watch_and_informer(client: ResourceStoreClient) -> None:
    for name in "abc":
        client.create(key(name), doc(name))
    with client.watch(PREFIX, send_initial_events=True) as watch:
        names = []
        for event in watch:
            if event.initial_events_end:
                break
            names.append(event.key.name if event.key else "")
        assert sorted(names) == ["a", "b", "c"]
        client.delete(key("b"))
        deleted = next(watch)
        assert (deleted.type, deleted.key) == ("deleted", key("b"))
    with client.informer(PREFIX, backoff=ReflectorBackoff(initial=0.01)) as informer:
        informer.wait_synced(10)
        assert set(informer.objects) == {key("a"), key("c")}
        client.create(key("d"), doc("d"))
        wait_until(lambda: key("d") in informer.objects, what="d in the informer")


@pytest.mark.parametrize("dialect", [Dialect.GRAFANA, Dialect.SEED])
def test_unauthorized_list_is_an_error_not_an_empty_list(dialect: Dialect) -> None:
    with (
        GrafanaLikeServer(dialect=dialect.value, require_token=True) as srv,
        ResourceStoreClient(srv.address, retry=FAST, dialect=dialect) as client,
    ):
        with pytest.raises(UnauthorizedError):
            list(client.list(PREFIX))
        with pytest.raises(UnauthorizedError):
            client.read(key("a"))
    with (
        GrafanaLikeServer(dialect=dialect.value, require_token=True) as srv,
        ResourceStoreClient(
            srv.address, retry=FAST, dialect=dialect, metadata=[("authorization", "Bearer t")]
        ) as client,
    ):
        assert list(client.list(PREFIX)) == []


def test_informer_drops_objects_deleted_without_previous() -> None:
    with (
        GrafanaLikeServer(deleted_without_previous=True) as srv,
        ResourceStoreClient(srv.address, retry=FAST) as client,
    ):
        client.create(key("a"), doc("a"))
        client.create(key("b"), doc("b"))
        deleted: list[str] = []
        with client.informer(PREFIX, on_delete=lambda o: deleted.append(o.key.name)) as informer:
            informer.wait_synced(10)
            client.delete(key("a"))
            wait_until(lambda: key("a") not in informer.objects, what="a dropped")
            assert set(informer.objects) == {key("b")}
            assert all(k.name for k in informer.objects)  # no key with an empty name
        assert deleted == ["a"]
