"""Search and stats (Grafana's ResourceIndex) on both clients, over the server's FTS5 index."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

import pytest

from xds_client.errors import UsageError
from xds_client.store import (
    AsyncResourceStoreClient,
    BadRequestError,
    Dialect,
    ResourceKey,
    ResourceStoreClient,
    StoreNotImplementedError,
)
from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._search import decode_cell, encode_cell
from xds_client.testing import ResourceStoreServer

from ._store_support import FAST, PREFIX, key

pytestmark = pytest.mark.timeout(60)


def dash(title: str, *tags: str, folder: str = "", **labels: str) -> dict[str, object]:
    meta: dict[str, object] = {"labels": labels}
    if folder:
        meta["annotations"] = {"grafana.app/folder": folder}
    return {"metadata": meta, "spec": {"title": title, "tags": list(tags)}}


@pytest.fixture
def client() -> Iterator[ResourceStoreClient]:
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as c:
        c.create(key("cpu"), dash("CPU usage", "infra", "linux", folder="ops", team="a"))
        c.create(key("mem"), dash("Memory usage", "infra", folder="ops", team="b"))
        c.create(key("biz"), dash("Revenue", "business", folder="sales", team="a"))
        c.create(key("cpu2"), dash("CPU by pod", "k8s", folder="ops", team="a"))
        yield c


def test_find_dashboards_by_title_words(client: ResourceStoreClient) -> None:
    result = client.search(PREFIX, "cpu")
    assert {h.key.name for h in result.hits} == {"cpu", "cpu2"}
    assert result.total_hits == 2
    assert all(h.score is not None and h.score > 0 for h in result.hits)
    assert result.max_score == max(h.score or 0 for h in result.hits)
    assert {h.key.name for h in client.search(PREFIX, "usa")} == {"cpu", "mem"}  # prefixes
    assert client.search(PREFIX, "cpu usage").hits[0].title == "CPU usage"
    assert client.search(PREFIX, "nothing-like-this").hits == ()


def test_tags_labels_fields_sort_and_paging(client: ResourceStoreClient) -> None:
    every = client.search(PREFIX)
    assert [h.title for h in every.hits] == ["CPU by pod", "CPU usage", "Memory usage", "Revenue"]
    hit = every.hits[1]
    assert hit.fields == {"title": "CPU usage", "folder": "ops", "tags": ["infra", "linux"]}
    assert hit.resource_version > 0
    assert {h.key.name for h in client.search(PREFIX, "infra")} == {"cpu", "mem"}  # tags match
    assert {h.key.name for h in client.search(PREFIX, labels="team=a")} == {"cpu", "biz", "cpu2"}
    names = client.search(PREFIX, fields=["name"], sort=["-title"])
    assert [h.fields["name"] for h in names.hits] == ["biz", "mem", "cpu", "cpu2"]
    first = client.search(PREFIX, limit=3)
    assert first.has_more
    rest = client.search(PREFIX, limit=3, offset=3)
    assert not rest.has_more
    assert [h.key.name for h in first.hits + rest.hits] == [h.key.name for h in every.hits]


def test_facets_count_over_all_hits(client: ResourceStoreClient) -> None:
    result = client.search(PREFIX, facets={"tags": 2, "folder": 10}, limit=1)
    tags = result.facets["tags"]
    assert tags.terms == (("infra", 2), ("business", 1))
    assert (tags.total, tags.missing) == (4, 0)
    assert result.facets["folder"].terms == (("ops", 3), ("sales", 1))


def test_search_follows_writes(client: ResourceStoreClient) -> None:
    client.update(key("biz"), dash("Revenue per CPU"), resource_version=0)
    client.delete(key("cpu2"))
    assert {h.key.name for h in client.search(PREFIX, "cpu")} == {"cpu", "biz"}


def test_stats_count_objects_per_kind(client: ResourceStoreClient) -> None:
    folder = ResourceKey("folder.grafana.app", "folders", "default", "ops")
    client.create(folder, {"spec": {"title": "Ops"}})
    stats = client.stats("default")
    assert [(s.group, s.resource, s.count) for s in stats] == [
        ("dashboard.grafana.app", "dashboards", 4),
        ("folder.grafana.app", "folders", 1),
    ]
    only = client.stats("default", kinds=["dashboard.grafana.app/dashboards"], folders=["ops"])
    assert [s.count for s in only] == [3]


def test_search_errors(client: ResourceStoreClient) -> None:
    with pytest.raises(BadRequestError, match="unknown search fields"):
        client.search(PREFIX, fields=["nope"])
    with pytest.raises(BadRequestError, match="group and resource"):
        client.search(ResourceKey("", ""))
    seed = ResourceStoreClient("127.0.0.1:1", dialect=Dialect.SEED)
    with seed, pytest.raises(UsageError, match="grafana"):
        seed.search(PREFIX, "x")


def test_a_seed_server_has_no_search() -> None:
    with ResourceStoreServer(dialect="seed") as srv:
        c = ResourceStoreClient(srv.address)  # a grafana client against a seed server
        with c, pytest.raises(StoreNotImplementedError):
            c.search(PREFIX, "x")


def test_cells_decode_by_column_type() -> None:
    col = pb.ResourceTableColumnDefinition
    cases = [
        (col(name="n", type=col.INT64), -5),
        (col(name="d", type=col.DOUBLE), 2.5),
        (col(name="b", type=col.BOOLEAN), True),
        (col(name="s", type=col.STRING), "é"),
        (col(name="a", type=col.STRING, is_array=True), ["x", "y"]),
        (col(name="o", type=col.OBJECT), {"k": 1}),
    ]
    for column, value in cases:
        assert decode_cell(column, encode_cell(column, value)) == value
    assert decode_cell(col(name="f", type=col.FLOAT), struct.pack(">f", 1.5)) == 1.5
    assert decode_cell(col(name="s", type=col.STRING), b"") is None


def test_async_search() -> None:
    async def body(address: str) -> tuple[list[str], int]:
        async with AsyncResourceStoreClient(address, retry=FAST) as c:
            await c.create(key("a"), dash("Alpha"))
            result = await c.search(PREFIX, "alpha")
            stats = await c.stats("default")
            return [h.key.name for h in result.hits], stats[0].count

    with ResourceStoreServer() as srv:
        assert asyncio.run(body(srv.address)) == (["a"], 1)


def test_a_file_store_indexes_what_it_held_before_search_was_on(tmp_path: object) -> None:
    db = str(tmp_path) + "/store.sqlite"
    with ResourceStoreServer(db, search=False) as srv:
        srv.put(key("old"), dash("Old dashboard"))
    with ResourceStoreServer(db) as srv, ResourceStoreClient(srv.address) as c:
        assert [h.key.name for h in c.search(PREFIX, "old")] == ["old"]
