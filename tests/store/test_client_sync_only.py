"""What only the blocking ResourceStoreClient does (the shared bodies are test_client_async.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from xds_client.store import ResourceKey, ResourceStoreClient
from xds_client.testing import ResourceStoreServer

from ._store_support import FAST, PREFIX, doc, key

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def client() -> Iterator[ResourceStoreClient]:
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as c:
        yield c


def test_sync_client_works_inside_a_running_event_loop(client: ResourceStoreClient) -> None:
    async def notebook_cell() -> list[str]:
        client.create(key("a"), doc())
        return [o.key.name for o in client.list(PREFIX)]

    assert asyncio.run(notebook_cell()) == ["a"]


def test_pytest_plugin_fixtures(resource_store_client: ResourceStoreClient) -> None:
    cluster_key = ResourceKey("dashboard.grafana.app", "dashboards", name="n")
    resource_store_client.create(cluster_key, doc())
    assert resource_store_client.read(cluster_key).resource_version == 1
