"""What the store client hands out shows itself in a notebook (issue #35)."""

from __future__ import annotations

import asyncio
import html
import threading

import pytest

from xds_client.store import (
    AsyncListIterator,
    AsyncResourceStoreClient,
    ResourceKey,
    ResourceStoreClient,
    StoredObject,
)
from xds_client.testing import ResourceStoreServer

pytestmark = pytest.mark.timeout(60)

KIND = ResourceKey("dashboard.grafana.app", "dashboards", "default")


def test_a_listing_and_an_object_show_as_tables() -> None:
    with ResourceStoreServer(":memory:") as server, ResourceStoreClient(server.address) as store:
        for name, team in [("cpu", "infra"), ("web", "web<&>")]:
            store.create(KIND.with_name(name), {"metadata": {"labels": {"team": team}}})
        listing = store.list(KIND)._repr_html_()
        assert listing.startswith("<table>")
        assert "<td>cpu</td>" in listing
        assert "<td>team=web&lt;&amp;&gt;</td>" in listing  # escaped
        obj: StoredObject = store.read(KIND.with_name("cpu"))
        view = obj._repr_html_()
        assert "<td>cpu</td>" in view
        assert "<pre>" in view
        assert "&quot;team&quot;: &quot;infra&quot;" in view


def test_an_informers_objects_show_as_a_table() -> None:
    with ResourceStoreServer(":memory:") as server, ResourceStoreClient(server.address) as store:
        store.create(KIND.with_name("cpu"), {"spec": {}})
        with store.informer(KIND) as informer:
            informer.wait_synced(10)
            view = informer.objects._repr_html_()  # type: ignore[attr-defined]
    assert view.startswith("<table>")
    assert "<td>cpu</td>" in view


async def _listing_on_loop(address: str) -> tuple[AsyncResourceStoreClient, AsyncListIterator]:
    store = AsyncResourceStoreClient(address)
    await store.create(KIND.with_name("cpu"), {"metadata": {"labels": {"team": "infra"}}})
    return store, store.list(KIND)


def test_an_asyncio_listing_shows_as_a_table_read_on_its_loop() -> None:
    # A notebook calls _repr_html_ without awaiting: the listing is read on the loop its
    # client lives on, here one running in another thread.
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with ResourceStoreServer(":memory:") as server:
            store, listing = asyncio.run_coroutine_threadsafe(
                _listing_on_loop(server.address), loop
            ).result(10)
            view = listing._repr_html_()
            asyncio.run_coroutine_threadsafe(store.aclose(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert view.startswith("<table>")
    assert "<td>cpu</td>" in view
    assert "<td>team=infra</td>" in view


def test_an_asyncio_listing_inside_its_running_loop_says_how_to_read_it() -> None:
    # A Jupyter cell runs inside the kernel's loop: reading there would deadlock, so the
    # view names the listing and how to read it, at once.
    async def view() -> str:
        with ResourceStoreServer(":memory:") as server:
            async with AsyncResourceStoreClient(server.address) as store:
                await store.create(KIND.with_name("cpu"), {"spec": {}})
                return store.list(KIND)._repr_html_()

    shown = asyncio.run(asyncio.wait_for(view(), 10))
    assert shown.startswith("<table>")
    assert "<td>cpu</td>" not in shown
    assert "async for" in shown
    assert html.escape(str(KIND)) in shown
