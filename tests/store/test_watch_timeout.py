"""A store watch with ``timeout`` ends by itself: a notebook cell cannot hang on it."""

from __future__ import annotations

import asyncio
import time

import pytest

from xds_client.errors import UsageError
from xds_client.store import AsyncResourceStoreClient, ResourceStoreClient
from xds_client.testing import ResourceStoreServer

from ._store_support import PREFIX, doc

pytestmark = pytest.mark.timeout(30)


def test_sync_watch_ends_after_its_timeout(resource_store_server: ResourceStoreServer) -> None:
    with ResourceStoreClient(resource_store_server.address) as client:
        client.create(PREFIX.with_name("a"), doc("a"))
        started = time.monotonic()
        events = list(client.watch(PREFIX, send_initial_events=True, timeout=0.5))
        elapsed = time.monotonic() - started
    assert [e.type for e in events][:1] == ["added"]
    assert 0.4 < elapsed < 5


def test_async_watch_ends_after_its_timeout(resource_store_server: ResourceStoreServer) -> None:
    async def scenario() -> list[str]:
        async with AsyncResourceStoreClient(resource_store_server.address) as client:
            await client.create(PREFIX.with_name("a"), doc("a"))
            return [e.type async for e in client.watch(PREFIX, timeout=0.5)]

    started = time.monotonic()
    assert asyncio.run(scenario()) == []
    assert 0.4 < time.monotonic() - started < 5


def test_timeout_must_be_positive(resource_store_server: ResourceStoreServer) -> None:
    with ResourceStoreClient(resource_store_server.address) as client, pytest.raises(UsageError):
        client.watch(PREFIX, timeout=0)
