# Generated from tests/store/test_async_edges.py by tools/gen_sync.py: do not edit.
"""Issue 26's ResourceStore edges on ResourceStoreClient (generated from
test_async_edges.py): ghosts after a 410, a field-selector watch that relisted
without backoff, and bulk's errors and modes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from xds_client.errors import UsageError
from xds_client.store import BadRequestError, ResourceStoreClient, StoreWatchEvent
from xds_client.testing import ResourceStoreServer

from ._grafana_like import GrafanaLikeServer
from ._store_support import FAST, PREFIX, doc, key

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def srv() -> Iterator[GrafanaLikeServer]:
    with GrafanaLikeServer() as grafana:
        yield grafana


def apply(view: dict[str, bytes], event: StoreWatchEvent) -> None:
    """What a consumer of a plain watch does with each event."""
    if event.type == "resynced":
        assert event.objects is not None
        view.clear()
        view.update({k.name: o.value for k, o in event.objects.items()})
    elif event.type == "deleted":
        assert event.key is not None
        view.pop(event.key.name, None)
    elif event.type in ("added", "modified"):
        assert event.key is not None
        assert event.value is not None
        view[event.key.name] = event.value


def server_view(srv: GrafanaLikeServer) -> dict[str, bytes]:
    return {k[3]: v for k, (_rv, v) in srv.objects.items()}


# ---------------------------------------------------------------- ghosts after a 410


def test_a_watch_from_a_compacted_version_converges_without_ghosts(
    srv: GrafanaLikeServer,
) -> None:
    with ResourceStoreClient(srv.address, retry=FAST, timeout=10) as client:
        for name in "abc":
            client.create(key(name), doc(name))
        listed = client.list(PREFIX)
        view = {o.key.name: o.value for o in listed}
        # Deleted while nobody watched, and the history is gone: a watch from the
        # list's version is 410 and lists again; "b" was never reported to it.
        client.delete(key("b"))
        client.update(key("c"), doc("C"), resource_version=0)
        client.create(key("d"), doc("d"))
        srv.compact()
        with client.watch(PREFIX, since=listed.resource_version, timeout=20) as w:
            for event in w:
                apply(view, event)
                if event.type == "resynced":
                    break
        assert w.state.resyncs == 1
    assert view == server_view(srv)


def test_a_watch_disconnected_past_compaction_converges_without_ghosts(
    srv: GrafanaLikeServer,
) -> None:
    with ResourceStoreClient(srv.address, retry=FAST, timeout=10) as client:
        for name in "abc":
            client.create(key(name), doc(name))
        listed = client.list(PREFIX)
        view = {o.key.name: o.value for o in listed}
        with client.watch(PREFIX, since=listed.resource_version, timeout=20) as w:
            client.create(key("e"), doc("e"))
            event = w.__next__()
            assert (event.type, event.key) == ("added", key("e"))
            apply(view, event)
            # The stream breaks; before the watch resumes (when asked for more),
            # "a" (from the consumer's list) and "e" (reported) go, and so does
            # the history.
            srv.drop_watches()
            client.delete(key("a"))
            client.delete(key("e"))
            srv.compact()
            for event in w:
                apply(view, event)
                if event.type == "resynced":
                    break
    assert view == server_view(srv)
    assert sorted(view) == ["b", "c"]


# ---------------------------------------------------------------- field selector after a 410


def test_a_field_selector_watch_after_a_410_does_not_relist_in_a_loop(
    srv: GrafanaLikeServer,
) -> None:
    with ResourceStoreClient(srv.address, retry=FAST, timeout=10) as client:
        first = client.create(key("a"), doc("a"))
        client.create(key("b"), doc("b"))
        for i in range(3):
            client.update(key("b"), doc(str(i)), resource_version=0)
        srv.compact()  # "a" is older than the history; its list says version `first`
        events: list[StoreWatchEvent] = []
        watch = client.watch(PREFIX, since=first, fields="metadata.name=a", timeout=1.5)
        with watch:
            for event in watch:  # for 1.5 s
                events.append(event)
        # Before the fix: the list's (older) version became the watch's, which
        # was 410 again at once: 1,300-2,100 lists in 3 s, without backoff.
        assert srv.calls["List"] <= 6, (srv.calls, [e.type for e in events][:10])
        assert [e.type for e in events] == ["added", "resynced"]
        assert watch.resource_version == srv.rv
        # The watch is live from there: a change of "a" arrives.
        watch = client.watch(PREFIX, since=watch.resource_version, fields="metadata.name=a")
        with watch:
            client.update(key("b"), doc("b"), resource_version=0)
            client.update(key("a"), doc("A"), resource_version=0)
            event = watch.__next__()
        assert (event.type, event.key, event.resource_version) == ("modified", key("a"), srv.rv)


# ---------------------------------------------------------------- bulk


def _failing_items() -> Iterator[tuple[object, object]]:
    yield key("x"), doc("x")
    raise LookupError("the item source broke")


def test_bulk_raises_the_items_own_error(server: ResourceStoreServer) -> None:
    with ResourceStoreClient(server.address, retry=FAST, timeout=10) as client:
        client.create(key("kept"), doc())
        with pytest.raises(LookupError, match="the item source broke"):
            client.bulk(PREFIX, _failing_items())  # type: ignore[arg-type]
        # Whether the test server committed the item is a race in Python's gRPC
        # server (a cancelled client stream ends like a complete one): not checked.


def test_bulk_without_rebuild_is_refused_before_sending(
    server: ResourceStoreServer,
) -> None:
    with ResourceStoreClient(server.address, retry=FAST, timeout=10) as client:
        client.create(key("kept"), doc())
        with pytest.raises(UsageError, match="rebuild=False"):
            client.bulk(PREFIX, [(key("x"), doc())], rebuild=False)
        assert server.calls["BulkProcess"] == 0
        assert [o.key.name for o in client.list(PREFIX)] == ["kept"]


# ---------------------------------------------------------------- the SQLite test server


@pytest.mark.parametrize("which", ["sqlite", "grafana-like"])
def test_an_empty_store_lists_at_one_or_more_and_a_watch_sees_the_first_write(
    which: str, server: ResourceStoreServer, srv: GrafanaLikeServer
) -> None:
    address = server.address if which == "sqlite" else srv.address
    with ResourceStoreClient(address, retry=FAST, timeout=10) as client:
        # Grafana's resource versions are never 0, and a watch from the empty
        # store's version sees the first write.
        empty = client.list(PREFIX)
        assert [o.key for o in empty] == []
        assert empty.resource_version >= 1
        with client.watch(PREFIX, since=empty.resource_version, timeout=10) as watch:
            client.create(key("a"), doc("a"))
            first = watch.__next__()
        assert (first.type, first.key) == ("added", key("a"))


def test_the_test_server_lists_as_grafana_does(server: ResourceStoreServer) -> None:
    with ResourceStoreClient(server.address, retry=FAST, timeout=10) as client:
        first_rv = client.create(key("a"), doc("a"))
        for name in "bc":
            client.create(key(name), doc(name))
        # "No limit" as some clients spell it: not a 500.
        everything = [o.key.name for o in client.list(PREFIX, limit=2**63 - 1)]
        assert everything == ["a", "b", "c"]
        # A page token continues its own list, at its version: another is a 400.
        page = client.list_page(PREFIX, limit=1)
        with pytest.raises(BadRequestError, match="page token"):
            client.list_page(
                PREFIX,
                limit=1,
                page_token=page.next_page_token,
                resource_version=page.resource_version - 1,
            )
        same = client.list_page(
            PREFIX, limit=1, page_token=page.next_page_token, resource_version=page.resource_version
        )
        assert [o.key.name for o in same.items] == ["b"]
        # A "not older than" list pages at the version it is pinned to.
        paged = client.list(PREFIX, limit=1, resource_version=first_rv)
        assert [o.key.name for o in paged] == ["a", "b", "c"]


# ---------------------------------------------------------------- a page over 4 MiB


def test_a_list_page_over_the_message_limit_is_asked_for_again_smaller(
    srv: GrafanaLikeServer,
) -> None:
    mib = 1024 * 1024
    with ResourceStoreClient(srv.address, retry=FAST, timeout=10) as client:
        # 1.98 MiB is under Grafana's 2 MiB page budget, so the next object (2.05
        # MiB) joins the page: 4.03 MiB, over the 4 MiB gRPC limit.
        client.create(key("a"), {"spec": {"blob": "x" * (2 * mib - 20_000)}})
        client.create(key("b"), {"spec": {"blob": "y" * (2 * mib + 50_000)}})
        client.create(key("c"), doc("c"))
        listed = client.list(PREFIX)
        assert [o.key.name for o in listed] == ["a", "b", "c"]
        page = client.list_page(PREFIX)
        assert [o.key.name for o in page.items] == ["a"]  # limit 500, 250, ... 1
        assert page.next_page_token
        srv.compact()
        names = []
        with client.watch(PREFIX, since=1, timeout=10) as watch:  # 410: it lists
            for event in watch:
                if event.type == "resynced":
                    break
                names.append(event.key.name if event.key else "")
        assert names == ["a", "b", "c"]
