"""Both wire dialects, and the bugs found against a server that follows Grafana's code."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from xds_client.errors import UsageError
from xds_client.store import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    Dialect,
    MessageTooLargeError,
    ResourceKey,
    ResourceStoreClient,
    RetryPolicy,
    TooManyRequestsError,
    UnauthorizedError,
    _calls,
    parse_selector,
)
from xds_client.store._errors import from_error_result, from_rpc_error
from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._watch import DeletedWithoutObjectError, WatchState
from xds_client.testing import ResourceStoreServer

from ._grafana_like import GrafanaLikeServer
from ._store_support import FAST, PREFIX, doc, key

pytestmark = pytest.mark.timeout(60)

DIALECTS = [Dialect.GRAFANA, Dialect.SEED]


@pytest.fixture(params=DIALECTS, ids=lambda d: d.value)
def dialect(request: pytest.FixtureRequest) -> Dialect:
    value: Dialect = request.param
    return value


@pytest.fixture
def server(dialect: Dialect) -> Iterator[ResourceStoreServer]:
    with ResourceStoreServer(dialect=dialect) as srv:
        yield srv


@pytest.fixture
def client(server: ResourceStoreServer, dialect: Dialect) -> Iterator[ResourceStoreClient]:
    with ResourceStoreClient(server.address, retry=FAST, timeout=10, dialect=dialect) as c:
        yield c


# ---------------------------------------------------------------- the wire


def _fields_on_the_wire(message: object) -> set[int]:
    from google.protobuf.internal.decoder import _DecodeVarint  # type: ignore[attr-defined]

    data: bytes = message.SerializeToString()  # type: ignore[attr-defined]
    numbers, pos = set(), 0
    while pos < len(data):
        tag, pos = _DecodeVarint(data, pos)
        numbers.add(tag >> 3)
        wire_type = tag & 7
        if wire_type == 0:
            _, pos = _DecodeVarint(data, pos)
        elif wire_type == 2:
            size, pos = _DecodeVarint(data, pos)
            pos += size
        else:
            raise AssertionError(f"unexpected wire type {wire_type}")
    return numbers


def test_read_at_a_version_uses_the_dialects_field_number() -> None:
    grafana = _calls.read_request(key("a"), 7, Dialect.GRAFANA)
    seed = _calls.read_request(key("a"), 7, Dialect.SEED)
    assert _fields_on_the_wire(grafana) == {1, 2}  # today's Grafana: field 2
    assert _fields_on_the_wire(seed) == {1, 3}  # the seed: field 3


def test_list_version_match_uses_the_dialects_field() -> None:
    grafana = _calls.ListPager(PREFIX, (), resource_version=5, exact=True).request()
    seed = _calls.ListPager(PREFIX, (), resource_version=5, exact=True, dialect=Dialect.SEED)
    assert grafana.version_match_v2 == pb.Exact
    assert not grafana.HasField("version_match")
    assert 7 in _fields_on_the_wire(grafana)
    assert seed.request().version_match == pb.DEPRECATED_Exact
    assert 7 not in _fields_on_the_wire(seed.request())
    latest = _calls.ListPager(PREFIX, ()).request()
    assert latest.version_match_v2 == pb.Unset


def test_list_response_error_is_a_typed_error_not_an_empty_list() -> None:
    # Grafana answers a list it refuses with an OK status and ListResponse.error.
    pager = _calls.ListPager(PREFIX, ())
    refused = pb.ListResponse(
        error=pb.ErrorResult(code=401, reason="Unauthorized", message="no identity")
    )
    with pytest.raises(UnauthorizedError, match="no identity"):
        pager.on_page(refused, None)
    with pytest.raises(UnauthorizedError):
        _calls.ListPager(PREFIX, ()).on_page_wire(refused, None)


def test_unknown_dialect_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="grafana"):
        ResourceStoreClient("127.0.0.1:1", dialect="v9")


# ---------------------------------------------------------------- both dialects, end to end


def test_read_at_a_version_returns_that_version(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    rv1 = client.create(key("a"), doc("one"))
    client.update(key("a"), doc("two"), resource_version=rv1)
    assert client.read(key("a"), resource_version=rv1).json()["spec"]["title"] == "one"
    assert client.read(key("a")).json()["spec"]["title"] == "two"


def test_a_client_of_the_other_dialect_silently_reads_the_latest(dialect: Dialect) -> None:
    # Why the dialect matters: the version travels in a field the server ignores.
    other = Dialect.SEED if dialect is Dialect.GRAFANA else Dialect.GRAFANA
    with (
        ResourceStoreServer(dialect=dialect) as srv,
        ResourceStoreClient(srv.address, retry=FAST, dialect=other) as wrong,
    ):
        rv1 = wrong.create(key("a"), doc("one"))
        wrong.update(key("a"), doc("two"), resource_version=rv1)
        assert wrong.read(key("a"), resource_version=rv1).json()["spec"]["title"] == "two"


@pytest.mark.parametrize("kind", ["sqlite", "grafana-like"])
def test_todays_grafana_migrates_the_seeds_version_match(kind: str) -> None:
    # A seed client's exact list reaches today's Grafana in the deprecated field,
    # which Grafana migrates to version_match_v2 (MigrateListRequestVersionMatch):
    # the list is at the version asked for, not the latest.
    with contextlib.ExitStack() as stack:
        if kind == "sqlite":
            srv: Any = stack.enter_context(ResourceStoreServer(dialect=Dialect.GRAFANA))
        else:
            srv = stack.enter_context(GrafanaLikeServer(dialect="grafana"))
        seed = stack.enter_context(ResourceStoreClient(srv.address, retry=FAST, dialect="seed"))
        for name in "abc":
            seed.create(key(name), doc(name))
        rv = seed.list_page(PREFIX).resource_version
        seed.delete(key("b"))
        then = seed.list(PREFIX, resource_version=rv, exact=True)
        assert [o.key.name for o in then] == ["a", "b", "c"]
        assert then.resource_version == rv
        assert [o.key.name for o in seed.list(PREFIX, resource_version=rv)] == ["a", "c"]


def test_list_at_an_exact_version(server: ResourceStoreServer, client: ResourceStoreClient) -> None:
    for name in "abc":
        client.create(key(name), doc(name))
    rv = server.resource_version
    client.delete(key("b"))
    client.create(key("d"), doc("d"))
    then = client.list(PREFIX, resource_version=rv, exact=True, limit=2)
    assert [o.key.name for o in then] == ["a", "b", "c"]
    assert then.resource_version == rv
    assert [o.key.name for o in client.list(PREFIX)] == ["a", "c", "d"]


def test_list_errors_are_typed_in_both_dialects(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    server.fail_next(1, 401, methods=["List"])
    with pytest.raises(UnauthorizedError):
        list(client.list(PREFIX))


def test_field_selector_on_metadata_name(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    for name in "abc":
        client.create(key(name), doc(name))
    assert [o.key.name for o in client.list(PREFIX, fields="metadata.name=b")] == ["b"]
    assert [o.key.name for o in client.list(PREFIX, fields="metadata.name!=b")] == ["a", "c"]
    page = client.list_page(PREFIX, fields="metadata.name=c")
    assert [o.key.name for o in page.items] == ["c"]


def test_history_and_trash_need_todays_grafana(
    server: ResourceStoreServer, client: ResourceStoreClient, dialect: Dialect
) -> None:
    rv1 = client.create(key("a"), doc("one"))
    rv2 = client.update(key("a"), doc("two"), resource_version=rv1)
    client.create(key("b"), doc("b"))
    client.delete(key("b"))
    if dialect is Dialect.SEED:
        with pytest.raises(UsageError, match="grafana"):
            client.list(key("a"), source="history")
        return
    history = list(client.list(key("a"), source="history", limit=1))
    assert [o.resource_version for o in history] == [rv2, rv1]
    assert [o.json()["spec"]["title"] for o in history] == ["two", "one"]
    trash = list(client.list(PREFIX, source="trash"))
    assert [o.key.name for o in trash] == ["b"]


# ---------------------------------------------------------------- size limits


def test_a_write_whose_response_is_too_large_is_not_429_and_not_retried(
    server: ResourceStoreServer, dialect: Dialect
) -> None:
    limit = 100_000
    with ResourceStoreClient(
        server.address, retry=FAST, max_message_size=limit, dialect=dialect
    ) as client:
        # The request fits; the stored object (the server adds its metadata) does not.
        def body(n: int) -> bytes:
            return b'{"spec":{"blob":"' + b"x" * n + b'"}}'

        size = _calls.create_request(key("big"), body(0)).ByteSize()
        big = body(limit - size - 20)
        assert _calls.create_request(key("big"), big).ByteSize() < limit
        with pytest.raises(MessageTooLargeError) as err:
            client.create(key("big"), big)
        assert not isinstance(err.value, TooManyRequestsError)
        assert err.value.limit == limit
        assert "may have taken effect" in str(err.value)
        assert server.calls["Create"] == 1
        assert server.resource_version == 1  # it was saved once, not retried into 409


def test_a_write_over_the_limit_is_refused_before_sending(server: ResourceStoreServer) -> None:
    with ResourceStoreClient(server.address, retry=FAST, max_message_size=50_000) as client:
        with pytest.raises(MessageTooLargeError, match="50000 bytes") as err:
            client.create(key("big"), {"spec": {"blob": "x" * 60_000}})
        assert err.value.limit == 50_000
        assert server.calls["Create"] == 0


def test_reading_or_watching_an_object_over_the_limit_fails_clearly(
    server: ResourceStoreServer,
) -> None:
    server.put(key("big"), {"spec": {"blob": "x" * 80_000}})
    with ResourceStoreClient(server.address, retry=FAST, max_message_size=50_000) as client:
        with pytest.raises(MessageTooLargeError):
            client.read(key("big"))
        assert server.calls["Read"] == 1
        errors: list[BaseException] = []
        with client.watch(PREFIX, since=server.resource_version) as watch:

            def consume() -> None:
                try:
                    next(watch)
                except BaseException as exc:
                    errors.append(exc)

            thread = threading.Thread(target=consume)
            thread.start()
            server.wait_for_watchers(1)
            server.put(key("big"), {"spec": {"blob": "y" * 80_000}})
            thread.join(20)
        # It fails once, clearly, instead of resuming into the same object forever.
        assert len(errors) == 1
        assert isinstance(errors[0], MessageTooLargeError)
        assert watch.state.streams == 1


def test_default_list_works_with_8_kb_objects(server: ResourceStoreServer) -> None:
    # 500 objects of 9 KB are 4.5 MB: over gRPC's 4 MiB unless pages stop at 2 MiB.
    blob = "x" * 9000
    server.put_many([(key(f"o{i:04}"), {"spec": {"blob": blob}}) for i in range(600)])
    with ResourceStoreClient(server.address, retry=FAST) as client:
        items = client.list(PREFIX)
        assert sum(1 for _ in items) == 600
        assert items.pages >= 3
    page = _calls.ListPager(PREFIX, (), limit=500)
    first = _raw_list(server, page.request())
    assert sum(len(i.value) for i in first.items) < 2 * 1024 * 1024 + 10_000
    assert first.next_page_token


def _raw_list(server: ResourceStoreServer, request: pb.ListRequest) -> pb.ListResponse:
    from xds_client.store._proto import resource_pb2_grpc as pb_grpc

    with grpc.insecure_channel(server.address) as channel:
        resp: pb.ListResponse = pb_grpc.ResourceStoreStub(channel).List(request, timeout=10)
        return resp


def test_size_errors_from_grpc_are_not_429() -> None:
    class Exhausted(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.RESOURCE_EXHAUSTED

        def details(self) -> str:
            return "Received message larger than max (5000000 vs. 4194304)"

    err = from_rpc_error(Exhausted(), ())
    assert type(err) is MessageTooLargeError
    assert err.limit == 4194304


# ---------------------------------------------------------------- old servers' errors


def test_optimistic_locking_failed_is_a_conflict() -> None:
    bare = pb.ErrorResult(code=500, message="optimistic locking failed")
    assert type(from_error_result(bare)) is ConflictError
    assert from_error_result(bare).code == 409


def test_key_already_exists_without_reason_is_already_exists() -> None:
    old = pb.ErrorResult(code=409, message="key already exists")
    assert type(from_error_result(old)) is AlreadyExistsError
    stale = pb.ErrorResult(code=409, message="the object has been modified")
    assert type(from_error_result(stale)) is ConflictError


def test_read_modify_write_lands_every_increment_under_contention() -> None:
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as client:
        client.create(key("n"), {"spec": {"n": 0}})

        def bump(d: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
            d["spec"]["n"] += 1
            return d

        def worker() -> None:
            for _ in range(10):
                client.read_modify_write(key("n"), bump, max_attempts=100)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert client.read(key("n")).json()["spec"]["n"] == 40


# ---------------------------------------------------------------- deadlines and health


def test_retry_after_never_outlives_the_deadline(server: ResourceStoreServer) -> None:
    policy = RetryPolicy(initial_backoff=0.01, max_attempts=10, deadline=1.0)
    with ResourceStoreClient(server.address, retry=policy) as client:
        server.fail_next(10, 429, retry_after=30, methods=["Read"])
        started = time.monotonic()
        with pytest.raises(TooManyRequestsError):
            client.read(key("a"))
        assert time.monotonic() - started < 5


def test_is_healthy_retries_a_transient_failure(server: ResourceStoreServer) -> None:
    with ResourceStoreClient(server.address, retry=FAST) as client:
        server.fail_next(1, grpc.StatusCode.UNAVAILABLE, methods=["IsHealthy"])
        assert client.is_healthy() is True
        assert server.calls["IsHealthy"] == 2


# ---------------------------------------------------------------- watches


def test_deleted_event_without_the_object_relists_instead_of_guessing() -> None:
    state = WatchState(PREFIX, (), since=5, policy=FAST)
    with pytest.raises(DeletedWithoutObjectError) as err:
        state.on_event(
            pb.WatchEvent(type=pb.WatchEvent.DELETED, resource=pb.WatchEvent.Resource(version=6))
        )
    state.stream_ended(err.value)
    assert state.step.value == "list"
    assert state.resyncing


def test_a_watch_from_a_version_ahead_of_the_server_relists(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    client.create(key("a"), doc("a"))
    with client.watch(PREFIX, since=1000) as watch:
        first = next(watch)
        assert first.type == "added"  # the relist reports what exists
        assert first.key == key("a")
        assert next(watch).type == "resynced"
        client.create(key("b"), doc("b"))
        assert next(watch).key == key("b")
    assert watch.state.resyncs == 1


def test_informer_drops_an_object_deleted_without_previous() -> None:
    state = WatchState(PREFIX, (), initial="list", policy=FAST)
    state.list_started()
    state.list_item(3, json.dumps({"metadata": {"name": "a"}}).encode())
    state.list_done(3)
    assert state.known_count() == 1
    with pytest.raises(DeletedWithoutObjectError) as err:
        state.on_event(
            pb.WatchEvent(type=pb.WatchEvent.DELETED, resource=pb.WatchEvent.Resource(version=4))
        )
    state.stream_ended(err.value)
    state.list_started()
    state.list_done(4)  # the fresh list no longer has "a"
    deleted = [e for e in state.pending if e.type == "deleted"]
    assert [e.key for e in deleted] == [key("a")]


# ---------------------------------------------------------------- the test server as Grafana


@pytest.mark.parametrize(
    "name",
    ["a b", "ü", "a/b", "a\0b", "x" * 254, "", "a\n"],
)
def test_server_rejects_names_grafana_rejects(server: ResourceStoreServer, name: str) -> None:
    with ResourceStoreClient(server.address, retry=FAST) as client:
        if not name:
            pytest.skip("an empty name is a local usage error")
        with pytest.raises(BadRequestError, match="name"):
            client.create(key(name), doc())


def test_server_accepts_grafana_names(server: ResourceStoreServer) -> None:
    with ResourceStoreClient(server.address, retry=FAST) as client:
        for name in ["1abc", "a:b", "A_b.c-d", "x" * 253]:
            client.create(key(name), doc())


@pytest.mark.parametrize(
    ("namespace", "group", "resource"),
    [
        ("d", "dashboard.grafana.app", "dashboards"),  # namespace too short
        ("default", "dashboard grafana", "dashboards"),
        ("default", "dashboard.grafana.app", "dash/boards"),
        ("default", "dashboard.grafana.app", "1dashboards"),
        ("n" * 41, "dashboard.grafana.app", "dashboards"),
    ],
)
def test_server_rejects_namespaces_groups_and_resources_grafana_rejects(
    server: ResourceStoreServer, namespace: str, group: str, resource: str
) -> None:
    client = ResourceStoreClient(server.address, retry=FAST)
    with client, pytest.raises(BadRequestError, match="invalid key"):
        client.create(ResourceKey(group, resource, namespace, "a"), doc())


@pytest.mark.parametrize(
    "body",
    [b'{"spec": {"x": NaN}}', b'{"spec": {"x": Infinity}}', b"[" * 100_000 + b"]" * 100_000],
)
def test_server_rejects_nan_and_json_too_deep(server: ResourceStoreServer, body: bytes) -> None:
    with ResourceStoreClient(server.address, retry=FAST) as client:
        with pytest.raises(BadRequestError):
            client.create(key("a"), body)
        assert server.resource_version == 0


def test_a_write_is_one_transaction(
    server: ResourceStoreServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*args: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(server, "_record", crash)
    with pytest.raises(sqlite3.OperationalError):
        server.put(key("a"), doc())
    monkeypatch.undo()
    # Neither the object nor a version was kept without its event.
    assert server.resource_version == 0
    with ResourceStoreClient(server.address, retry=FAST) as client:
        assert list(client.list(PREFIX)) == []
        assert client.create(key("a"), doc()) == 2  # the list of the empty store was at 1


def test_a_second_server_on_the_same_file_is_refused(tmp_path: Path) -> None:
    db = str(tmp_path / "store.sqlite")
    with ResourceStoreServer(db) as first:
        first.put(key("a"), doc())
        second = ResourceStoreServer(db)
        with pytest.raises(UsageError, match="in use"):
            second.start()
    with ResourceStoreServer(db) as again:  # free once the first one stopped
        assert again.resource_version == 1


def test_selector_fixes_reach_the_wire(server: ResourceStoreServer) -> None:
    server.put(key("a"), doc(tier=""))
    server.put(key("b"), doc(tier="x"))
    with ResourceStoreClient(server.address, retry=FAST) as client:
        names = [o.key.name for o in client.list(PREFIX, labels="tier in (x,,)")]
        assert names == ["a", "b"]
        assert parse_selector("tier in (x,,)")[0].values == ("", "x")


def test_watch_since_a_list_with_known_reports_deletions_after_410(
    server: ResourceStoreServer, client: ResourceStoreClient
) -> None:
    for name in "abc":
        client.create(key(name), doc(name))
    listed = client.list(PREFIX)
    objects = list(listed)
    # During the gap "b" goes and the history is forgotten: the watch gets 410.
    client.delete(key("b"))
    client.create(key("d"), doc("d"))
    server.compact()
    with client.watch(PREFIX, since=listed.resource_version, known=objects) as watch:
        tail = []
        for event in watch:
            tail.append(event)
            if event.type == "resynced":
                break
    changes = {(e.type, e.key.name) for e in tail[:-1] if e.key}
    assert changes == {("deleted", "b"), ("added", "d")}
    assert watch.state.resyncs == 1


def test_each_attempt_is_cut_to_the_time_the_deadline_leaves() -> None:
    from xds_client.store._retry import attempt_timeout

    policy = RetryPolicy(deadline=10.0)
    assert attempt_timeout(30.0, policy, 0.0, 4.0) == 6.0
    assert attempt_timeout(None, policy, 0.0, 4.0) == 6.0
    assert attempt_timeout(3.0, policy, 0.0, 4.0) == 3.0
    assert attempt_timeout(30.0, policy.with_deadline(None), 0.0, 4.0) == 30.0
