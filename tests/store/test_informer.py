# Generated from tests/store/test_async_informer.py by tools/gen_sync.py: do not edit.
"""Informer and ResourceStoreClient against the in-process store (generated from
test_async_informer.py).

Handlers may read the informer they belong to: the sync informer used to call
them under its non-reentrant lock, so ``informer.get()`` in a handler deadlocked.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from xds_client._backends.threads import Event
from xds_client.store import ResourceStoreClient, StoredObject
from xds_client.testing import ResourceStoreServer
from xds_client.transport import ServerTarget

from ._store_support import FAST, PREFIX, doc, key

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def server() -> Iterator[ResourceStoreServer]:
    with ResourceStoreServer() as srv:
        yield srv


def test_handler_reads_the_informer(server: ResourceStoreServer) -> None:
    server.put_many([(key("a"), doc("A"))])
    seen: list[tuple[str, bool, int]] = []
    done = Event()

    def on_add(obj: StoredObject) -> None:
        seen.append((obj.key.name, informer.get(obj.key) is not None, len(informer.objects)))
        if obj.key.name == "b":
            done.set()

    with ResourceStoreClient(server.address, retry=FAST, timeout=10) as client:
        informer = client.informer(PREFIX, on_add=on_add)
        with informer:
            informer.wait_synced(5)
            client.create(key("b"), doc("B"))
            assert done.wait(5), f"the handler did not complete; saw {seen}"
    assert seen == [("a", True, 1), ("b", True, 2)]


def test_informer_follows_changes_and_stops(server: ResourceStoreServer) -> None:
    server.put_many([(key(f"a{i}"), doc(str(i), app="web")) for i in range(3)])
    server.put(key("other"), doc(app="db"))
    log: list[tuple[str, str]] = []
    done = Event()

    def on_add(obj: StoredObject) -> None:
        log.append(("add", obj.key.name))
        if obj.key.name == "a9":
            done.set()

    with ResourceStoreClient(server.address, retry=FAST, timeout=10) as client:
        informer = client.informer(
            PREFIX,
            "app=web",
            on_add=on_add,
            on_update=lambda old, new: log.append(("update", new.key.name)),
            on_delete=lambda obj: log.append(("delete", obj.key.name)),
        )
        with informer:
            informer.wait_synced(10)
            assert informer.has_synced
            assert sorted(k.name for k in informer.objects) == ["a0", "a1", "a2"]
            client.update(key("a1"), doc("changed", app="web"), resource_version=0)
            client.delete(key("a2"))
            client.create(key("a9"), doc(app="web"))
            assert done.wait(10)
            changed = informer.get(key("a1"))
            assert changed is not None
            assert changed.json()["spec"]["title"] == "changed"
            assert informer.get(key("a2")) is None
        assert informer.error is None
    assert log[3:] == [("update", "a1"), ("delete", "a2"), ("add", "a9")]


def test_store_client_takes_a_server_target(server: ResourceStoreServer) -> None:
    # The same vocabulary as the xDS clients: a ServerTarget (credentials, options ...).
    target = ServerTarget(server.address, channel_options=(("grpc.primary_user_agent", "t"),))
    with ResourceStoreClient(target, retry=FAST, timeout=10) as client:
        assert client.create(key("t"), doc("T")) > 0
        assert (client.read(key("t"))).json()["spec"]["title"] == "T"
