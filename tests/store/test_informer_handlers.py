"""Informer handlers may read the informer they belong to (sync and async alike).

The sync informer used to call handlers under its non-reentrant lock, so a
handler calling ``informer.get()`` or reading ``informer.objects`` deadlocked
the informer thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from xds_client.store import AsyncResourceStoreClient, ResourceStoreClient, StoredObject
from xds_client.testing import ResourceStoreServer

from ._store_support import FAST, PREFIX, doc, key

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def server() -> Iterator[ResourceStoreServer]:
    with ResourceStoreServer() as srv:
        yield srv


def test_sync_handler_reads_the_informer(server: ResourceStoreServer) -> None:
    server.put_many([(key("a"), doc("A"))])
    seen: list[tuple[str, bool, int]] = []
    done = threading.Event()
    with ResourceStoreClient(server.address, retry=FAST, timeout=10) as client:

        def on_add(obj: StoredObject) -> None:
            seen.append((obj.key.name, informer.get(obj.key) is not None, len(informer.objects)))
            if obj.key.name == "b":
                done.set()

        informer = client.informer(PREFIX, on_add=on_add)
        with informer:
            informer.wait_synced(5)
            client.create(key("b"), doc("B"))
            assert done.wait(5), f"the handler did not complete; saw {seen}"
    assert seen == [("a", True, 1), ("b", True, 2)]


def test_async_handler_reads_the_informer(server: ResourceStoreServer) -> None:
    server.put_many([(key("a"), doc("A"))])
    seen: list[tuple[str, bool, int]] = []

    async def body() -> None:
        async with AsyncResourceStoreClient(server.address, retry=FAST, timeout=10) as client:
            done = asyncio.Event()

            def on_add(obj: StoredObject) -> None:
                seen.append(
                    (obj.key.name, informer.get(obj.key) is not None, len(informer.objects))
                )
                if obj.key.name == "b":
                    done.set()

            informer = client.informer(PREFIX, on_add=on_add)
            async with informer:
                await informer.wait_synced(5)
                await client.create(key("b"), doc("B"))
                await asyncio.wait_for(done.wait(), 5)

    asyncio.run(body())
    assert seen == [("a", True, 1), ("b", True, 2)]
