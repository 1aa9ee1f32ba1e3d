"""Search and stats (Grafana's ResourceIndex): typed requests and results, both surfaces.

``ResourceIndex`` is the one Grafana service meant to be called by clients
directly: ``Search`` finds objects of one resource type by free text, labels
and fields, with paging, sorting and facets; ``GetStats`` counts objects per
kind. Results come as a ``ResourceTable``: typed columns and one row per
object, each cell encoded by its column's type (strings as UTF-8, numbers
big-endian, arrays and objects as JSON), decoded here into Python values.
There is no read-after-write guarantee: an index may lag the store.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xds_client.store._errors import InvalidResponseError, check_result
from xds_client.store._keys import ResourceKey
from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._proto import search_pb2 as spb
from xds_client.store._selector import Requirement

__all__ = ["SearchHit", "SearchFacet", "SearchResult", "KindStats"]

_Column = pb.ResourceTableColumnDefinition


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One object found by a search."""

    key: ResourceKey
    """Its full key."""
    resource_version: int
    """The version the index saw."""
    fields: Mapping[str, Any]
    """The returned columns by name (``title``, ``folder``, ``tags``, ``_score`` ...)."""

    @property
    def title(self) -> str | None:
        """The ``title`` column, when returned."""
        value = self.fields.get("title")
        return value if isinstance(value, str) else None

    @property
    def score(self) -> float | None:
        """The relevance score (only meaningful with a text query)."""
        value = self.fields.get("_score")
        return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True, slots=True)
class SearchFacet:
    """Term counts of one field over all hits (not only this page)."""

    field: str
    """The field."""
    total: int
    """How many distinct terms."""
    missing: int
    """How many hits lack the field."""
    terms: tuple[tuple[str, int], ...]
    """``(term, count)``, most frequent first, cut at the facet's limit."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One page of search results."""

    hits: tuple[SearchHit, ...]
    """This page's hits, in order."""
    total_hits: int
    """Hits over all pages."""
    max_score: float
    """The best score."""
    facets: Mapping[str, SearchFacet] = field(default_factory=dict)
    """Facets asked for, by name."""
    resource_version: int = 0
    """The version of the index that answered."""
    offset: int = 0
    """Where this page starts; the next page starts at ``offset + len(hits)``."""

    @property
    def has_more(self) -> bool:
        """Whether hits remain after this page."""
        return self.offset + len(self.hits) < self.total_hits

    def __iter__(self) -> Iterator[SearchHit]:
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)


@dataclass(frozen=True, slots=True)
class KindStats:
    """How many objects a kind has (``GetStats``)."""

    group: str
    """API group."""
    resource: str
    """Resource type."""
    count: int
    """Objects."""


# ------------------------------------------------------------------ requests


def search_request(
    prefix: ResourceKey,
    query: str,
    *,
    labels: tuple[Requirement, ...],
    fields: Sequence[str],
    limit: int,
    offset: int,
    sort: Sequence[str],
    facets: Mapping[str, int] | Sequence[str],
) -> spb.ResourceSearchRequest:
    """The request; ``sort`` entries are field names, ``"-field"`` for descending."""
    req = spb.ResourceSearchRequest(
        options=pb.ListOptions(
            key=prefix.prefix().to_proto(), labels=[r.to_proto() for r in labels]
        ),
        query=query,
        limit=limit,
        offset=offset,
        fields=list(fields),
    )
    for name in sort:
        desc = name.startswith("-")
        req.sortBy.add(field=name.lstrip("-"), desc=desc)
    facet_limits = facets if isinstance(facets, Mapping) else dict.fromkeys(facets, 10)
    for name, top in facet_limits.items():
        req.facet[name].field = name
        req.facet[name].limit = top
    return req


def stats_request(namespace: str, kinds: Sequence[str], folders: Sequence[str]) -> Any:
    """The ``GetStats`` request; ``kinds`` are ``"group/resource"``."""
    return spb.ResourceStatsRequest(namespace=namespace, kinds=list(kinds), folder=list(folders))


# ------------------------------------------------------------------ results


def decode_cell(column: _Column, cell: bytes) -> Any:
    """A cell as a Python value, following the column's type."""
    if not cell:
        return None
    kind = column.type
    if column.is_array or kind == _Column.OBJECT:
        return json.loads(cell)
    if kind in (_Column.INT32, _Column.INT64, _Column.DATE, _Column.DATE_TIME):
        return int.from_bytes(cell, "big", signed=True)
    if kind in (_Column.FLOAT, _Column.DOUBLE):
        if len(cell) == 4:
            return struct.unpack(">f", cell)[0]
        if len(cell) == 8:
            return struct.unpack(">d", cell)[0]
        raise InvalidResponseError(f"column {column.name!r}: {len(cell)} bytes for a float")
    if kind == _Column.BOOLEAN:
        return cell not in (b"\x00", b"false")
    if kind == _Column.BINARY:
        return bytes(cell)
    return cell.decode("utf-8", errors="replace")


def encode_cell(column: _Column, value: Any) -> bytes:
    """The cell for a value (the test server's side of :func:`decode_cell`)."""
    if value is None:
        return b""
    kind = column.type
    if column.is_array or kind == _Column.OBJECT:
        return json.dumps(value).encode()
    if kind in (_Column.INT32, _Column.INT64, _Column.DATE, _Column.DATE_TIME):
        return int(value).to_bytes(8, "big", signed=True)
    if kind in (_Column.FLOAT, _Column.DOUBLE):
        return struct.pack(">d", float(value))
    if kind == _Column.BOOLEAN:
        return b"\x01" if value else b"\x00"
    return str(value).encode()


def search_result(resp: spb.ResourceSearchResponse, trailing: Any, offset: int) -> SearchResult:
    """Raise the typed error of a failed search, or decode its table."""
    check_result(resp.error if resp.HasField("error") else None, trailing)
    columns = list(resp.results.columns)
    hits = []
    for row in resp.results.rows:
        if len(row.cells) > len(columns):
            raise InvalidResponseError(
                f"search row {row.key.name!r} has {len(row.cells)} cells for {len(columns)} columns"
            )
        values = {c.name: decode_cell(c, cell) for c, cell in zip(columns, row.cells, strict=False)}
        hits.append(SearchHit(ResourceKey.from_proto(row.key), row.resource_version, values))
    facets = {
        name: SearchFacet(
            f.field or name, f.total, f.missing, tuple((t.term, t.count) for t in f.terms)
        )
        for name, f in resp.facet.items()
    }
    return SearchResult(
        tuple(hits),
        resp.total_hits,
        resp.max_score,
        facets,
        resp.resource_version,
        offset,
    )


def stats_result(resp: Any, trailing: Any) -> list[KindStats]:
    """Raise the typed error of failed stats, or list them."""
    check_result(resp.error if resp.HasField("error") else None, trailing)
    return [KindStats(s.group, s.resource, s.count) for s in resp.stats]
