"""BulkProcess: rebuild a collection in one client stream, on both client surfaces."""

from __future__ import annotations

import asyncio
import threading

import pytest

from xds_client.errors import UsageError
from xds_client.store import (
    AsyncResourceStoreClient,
    BadRequestError,
    BulkItem,
    Dialect,
    ResourceKey,
    ResourceStoreClient,
    _bulk,
)
from xds_client.testing import ResourceStoreServer

from ._store_support import FAST, PREFIX, doc, key

pytestmark = pytest.mark.timeout(60)


def test_bulk_rebuilds_the_collection_in_one_transaction() -> None:
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as client:
        client.create(key("old"), doc("old"))
        client.create(key("kept"), doc("before"))
        other = ResourceKey("folder.grafana.app", "folders", "default", "f")
        client.create(other, doc("untouched"))
        items = ((key(f"n{i:03}"), doc(str(i))) for i in range(200))  # consumed lazily
        result = client.bulk(PREFIX, [*items, (key("kept"), doc("after"))])
        assert result.processed == 201
        (summary,) = result.summary
        assert (summary.count, summary.previous_count) == (201, 2)
        assert summary.collection == PREFIX
        assert summary.resource_version == srv.resource_version
        names = {o.key.name for o in client.list(PREFIX)}
        assert "old" not in names
        assert len(names) == 201
        assert client.read(key("kept")).json()["spec"]["title"] == "after"
        assert client.read(other).json()["spec"]["title"] == "untouched"


def test_an_invalid_item_rolls_the_whole_bulk_back() -> None:
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as client:
        client.create(key("a"), doc("a"))
        before = srv.resource_version
        with pytest.raises(BadRequestError, match="bad name"):
            client.bulk(PREFIX, [(key("b"), doc()), (key("bad name"), doc())])
        assert srv.resource_version == before
        assert [o.key.name for o in client.list(PREFIX)] == ["a"]


def test_bulk_events_reach_watchers_once_the_stream_completes() -> None:
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as client:
        client.create(key("gone"), doc())
        got = []
        with client.watch(PREFIX, since=srv.resource_version) as watch:
            thread = threading.Thread(target=lambda: got.extend([next(watch), next(watch)]))
            thread.start()
            srv.wait_for_watchers(1)
            client.bulk(PREFIX, [BulkItem(key("new"), doc("n"))])
            thread.join(20)
        assert {(e.type, e.key.name) for e in got if e.key} == {
            ("added", "new"),
            ("deleted", "gone"),
        }


def test_bulk_usage_errors() -> None:
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as client:
        with pytest.raises(UsageError, match="not in the bulk's collection"):
            client.bulk(PREFIX, [(ResourceKey("folder.grafana.app", "folders", "x", "a"), doc())])
        with pytest.raises(UsageError, match="unknown bulk action"):
            client.bulk(PREFIX, [BulkItem(key("a"), doc(), action="replaced")])  # type: ignore[arg-type]
        assert srv.resource_version == 0
    seed = ResourceStoreClient("127.0.0.1:1", dialect=Dialect.SEED)
    with seed, pytest.raises(UsageError, match="grafana"):
        seed.bulk(PREFIX, [])


def test_server_refuses_what_grafana_refuses() -> None:
    import grpc

    from xds_client.store._proto import resource_pb2 as pb
    from xds_client.store._proto import resource_pb2_grpc as pb_grpc

    with ResourceStoreServer() as srv, grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.BulkStoreStub(channel)
        no_collection = stub.BulkProcess(iter([]), timeout=10)
        assert no_collection.error.code == 400
        assert "collection" in no_collection.error.message
        md = _bulk.settings_metadata(PREFIX, rebuild=False)
        no_rebuild = stub.BulkProcess(iter([pb.BulkRequest()]), metadata=tuple(md), timeout=10)
        assert "RebuildCollection" in no_rebuild.error.message


def test_async_bulk() -> None:
    async def body(address: str) -> int:
        async with AsyncResourceStoreClient(address, retry=FAST) as client:
            result = await client.bulk(PREFIX, [(key(f"a{i}"), doc()) for i in range(5)])
            return result.summary[0].count

    with ResourceStoreServer() as srv:
        assert asyncio.run(body(srv.address)) == 5
