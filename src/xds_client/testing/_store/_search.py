"""ResourceIndex (Search, GetStats) for the SQLite ResourceStoreServer, over SQLite FTS5.

Triggers on the ``objects`` table keep an FTS5 index of each object's
``spec.title`` and ``spec.tags`` in step with every write (same transaction),
so a search sees what the store holds. A text query matches words by prefix
(``cpu`` finds "CPU usage") and is ranked by BM25; without a query every
object of the resource matches, sorted by title. Labels filter, ``sortBy``
sorts, ``offset``/``limit`` page, and facets count the terms of ``tags``,
``folder`` or ``labels.<key>`` over all hits. Federated and deleted-object
searches are 501.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc

from xds_client.store._keys import labels_of, metadata_of
from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._proto import search_pb2 as spb
from xds_client.store._proto import search_pb2_grpc as spb_grpc
from xds_client.store._search import encode_cell
from xds_client.store._selector import Requirement, matches

SEARCH_SCHEMA = """
CREATE TABLE IF NOT EXISTS search_ids (
    grp TEXT NOT NULL, res TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
    UNIQUE (grp, res, ns, name)
);
CREATE VIRTUAL TABLE IF NOT EXISTS search_text USING fts5(title, tags, tokenize='unicode61');
CREATE TRIGGER IF NOT EXISTS search_on_insert AFTER INSERT ON objects BEGIN
    INSERT OR IGNORE INTO search_ids VALUES (new.grp, new.res, new.ns, new.name);
    INSERT INTO search_text (rowid, title, tags) VALUES (
        (SELECT rowid FROM search_ids WHERE grp = new.grp AND res = new.res
            AND ns = new.ns AND name = new.name),
        coalesce(json_extract(CAST(new.value AS TEXT), '$.spec.title'), ''),
        coalesce(json_extract(CAST(new.value AS TEXT), '$.spec.tags'), ''));
END;
CREATE TRIGGER IF NOT EXISTS search_on_update AFTER UPDATE ON objects BEGIN
    DELETE FROM search_text WHERE rowid = (SELECT rowid FROM search_ids WHERE
        grp = old.grp AND res = old.res AND ns = old.ns AND name = old.name);
    INSERT INTO search_text (rowid, title, tags) VALUES (
        (SELECT rowid FROM search_ids WHERE grp = new.grp AND res = new.res
            AND ns = new.ns AND name = new.name),
        coalesce(json_extract(CAST(new.value AS TEXT), '$.spec.title'), ''),
        coalesce(json_extract(CAST(new.value AS TEXT), '$.spec.tags'), ''));
END;
CREATE TRIGGER IF NOT EXISTS search_on_delete AFTER DELETE ON objects BEGIN
    DELETE FROM search_text WHERE rowid = (SELECT rowid FROM search_ids WHERE
        grp = old.grp AND res = old.res AND ns = old.ns AND name = old.name);
    DELETE FROM search_ids WHERE
        grp = old.grp AND res = old.res AND ns = old.ns AND name = old.name;
END;
"""

# Objects written before the index existed (a file opened with search=False).
SEARCH_BACKFILL = """
INSERT OR IGNORE INTO search_ids SELECT grp, res, ns, name FROM objects;
INSERT INTO search_text (rowid, title, tags)
    SELECT i.rowid,
        coalesce(json_extract(CAST(o.value AS TEXT), '$.spec.title'), ''),
        coalesce(json_extract(CAST(o.value AS TEXT), '$.spec.tags'), '')
    FROM search_ids AS i JOIN objects AS o ON o.grp = i.grp AND o.res = i.res
        AND o.ns = i.ns AND o.name = i.name
    WHERE i.rowid NOT IN (SELECT rowid FROM search_text);
"""

_Col = pb.ResourceTableColumnDefinition
_COLUMNS = {
    "name": _Col(name="name", type=_Col.STRING),
    "title": _Col(name="title", type=_Col.STRING),
    "folder": _Col(name="folder", type=_Col.STRING),
    "tags": _Col(name="tags", type=_Col.STRING, is_array=True),
    "description": _Col(name="description", type=_Col.STRING),
    "_score": _Col(name="_score", type=_Col.DOUBLE),
}
_DEFAULT_FIELDS = ("title", "folder", "tags")
_WORD = re.compile(r"\w+", re.UNICODE)
_FOLDER_ANNOTATION = "grafana.app/folder"


def field_value(doc: Any, name: str) -> Any:
    """A search field of a decoded object, as Grafana's document builder names them."""
    spec = doc.get("spec") if isinstance(doc, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    meta = metadata_of(doc)
    if name == "name":
        return meta.get("name")
    if name == "folder":
        annotations = meta.get("annotations")
        return annotations.get(_FOLDER_ANNOTATION) if isinstance(annotations, dict) else None
    if name in ("title", "description"):
        value = spec.get(name)
        return value if isinstance(value, str) else None
    if name == "tags":
        tags = spec.get("tags")
        return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else None
    if name.startswith("labels."):
        return labels_of(doc).get(name[len("labels.") :])
    return None


def _fts_query(text: str) -> str:
    # Every word must appear, as a prefix; quoting keeps FTS5 syntax out of user text.
    return " AND ".join(f'"{w}"*' for w in _WORD.findall(text))


def _sort_key(field: str) -> Any:
    def key(hit: Any) -> Any:
        if field == "_score":
            return hit[0]
        return str(field_value(hit[3], field) or "").lower()

    return key


def _failure(code: int, message: str) -> spb.ResourceSearchResponse:
    return spb.ResourceSearchResponse(error=pb.ErrorResult(code=code, message=message))


class ResourceIndexServicer(spb_grpc.ResourceIndexServicer):
    """Search and GetStats over the store's SQLite database.

    ``read`` returns the database and the store's revision; it is called, and the
    rows read, under ``lock``. ``calls`` counts the calls by method name.
    """

    def __init__(
        self,
        *,
        lock: threading.RLock,
        read: Callable[[], tuple[sqlite3.Connection, int]],
        calls: Counter[str],
    ) -> None:
        self._lock = lock
        self._read = read
        self._calls = calls

    def Search(  # noqa: N802 - gRPC method name
        self, request: spb.ResourceSearchRequest, context: grpc.ServicerContext
    ) -> spb.ResourceSearchResponse:
        self._calls["Search"] += 1
        key = request.options.key
        if not key.group or not key.resource:
            return _failure(400, "a search needs the group and resource of its key")
        if request.federated or request.is_deleted:
            return _failure(501, "federated and deleted-object search are not implemented")
        unknown = [f for f in request.fields if f not in _COLUMNS]
        if unknown:
            return _failure(400, f"unknown search fields {unknown}; known: {sorted(_COLUMNS)}")
        query = _fts_query(request.query)
        with self._lock:
            db, rv = self._read()
            ns_clause, ns_args = ("AND o.ns = ?", [key.namespace]) if key.namespace else ("", [])
            if query:
                rows = db.execute(
                    "SELECT o.grp, o.res, o.ns, o.name, o.rv, o.value, -bm25(search_text) "
                    "FROM search_text JOIN search_ids AS i ON i.rowid = search_text.rowid "
                    "JOIN objects AS o ON o.grp = i.grp AND o.res = i.res AND o.ns = i.ns "
                    f"AND o.name = i.name WHERE search_text MATCH ? AND o.grp = ? AND o.res = ? "
                    f"{ns_clause}",
                    (query, key.group, key.resource, *ns_args),
                ).fetchall()
            else:
                rows = db.execute(
                    "SELECT o.grp, o.res, o.ns, o.name, o.rv, o.value, 0.0 FROM objects AS o "
                    f"WHERE o.grp = ? AND o.res = ? {ns_clause}",
                    (key.group, key.resource, *ns_args),
                ).fetchall()
        reqs = tuple(Requirement.from_proto(r) for r in request.options.labels)
        hits = []
        for grp, res, ns, name, obj_rv, value, score in rows:
            doc = json.loads(value)
            if reqs and not matches(reqs, labels_of(doc)):
                continue
            hits.append((float(score), (grp, res, ns, name), int(obj_rv), doc))
        self._sort(hits, request, bool(query))
        resp = spb.ResourceSearchResponse(key=key, total_hits=len(hits), total_hits_exact=True)
        resp.resource_version = rv
        resp.max_score = max((h[0] for h in hits), default=0.0)
        names = list(request.fields) or [*_DEFAULT_FIELDS, *(("_score",) if query else ())]
        table = resp.results
        table.columns.extend(_COLUMNS[n] for n in names)
        limit = request.limit if request.limit > 0 else 50
        for score, (grp, res, ns, name), obj_rv, doc in hits[
            request.offset : request.offset + limit
        ]:
            row = table.rows.add(resource_version=obj_rv)
            row.key.CopyFrom(pb.ResourceKey(group=grp, resource=res, namespace=ns, name=name))
            for n in names:
                value = score if n == "_score" else field_value(doc, n)
                row.cells.append(encode_cell(_COLUMNS[n], value))
        for facet_name, facet in request.facet.items():
            self._facet(resp, facet_name, facet, [h[3] for h in hits])
        return resp

    @staticmethod
    def _sort(hits: list[Any], request: spb.ResourceSearchRequest, scored: bool) -> None:
        def title(h: Any) -> str:
            return str(field_value(h[3], "title") or "").lower()

        hits.sort(key=lambda h: (title(h), h[1]))
        if scored and not request.sortBy:
            hits.sort(key=lambda h: -h[0])
        for sort in reversed(request.sortBy):
            hits.sort(key=_sort_key(sort.field), reverse=sort.desc)

    @staticmethod
    def _facet(
        resp: spb.ResourceSearchResponse,
        name: str,
        facet: spb.ResourceSearchRequest.Facet,
        docs: list[Any],
    ) -> None:
        field = facet.field or name
        counts: Counter[str] = Counter()
        missing = 0
        for doc in docs:
            value = field_value(doc, field)
            if value is None or value == []:
                missing += 1
            elif isinstance(value, list):
                counts.update(str(v) for v in value)
            else:
                counts[str(value)] += 1
        out = resp.facet[name]
        out.field = field
        out.total = len(counts)
        out.missing = missing
        top = facet.limit if facet.limit > 0 else 10
        for term, count in sorted(counts.items(), key=lambda tc: (-tc[1], tc[0]))[:top]:
            out.terms.add(term=term, count=count)

    def GetStats(  # noqa: N802 - gRPC method name
        self, request: spb.ResourceStatsRequest, context: grpc.ServicerContext
    ) -> spb.ResourceStatsResponse:
        self._calls["GetStats"] += 1
        with self._lock:
            db, _ = self._read()
            rows = db.execute(
                "SELECT grp, res, value FROM objects WHERE ns = ?", (request.namespace,)
            ).fetchall()
        kinds = set(request.kinds)
        folders = set(request.folder)
        counts: Counter[tuple[str, str]] = Counter()
        for grp, res, value in rows:
            if kinds and f"{grp}/{res}" not in kinds:
                continue
            if folders and field_value(json.loads(value), "folder") not in folders:
                continue
            counts[(grp, res)] += 1
        resp = spb.ResourceStatsResponse()
        for (grp, res), count in sorted(counts.items()):
            resp.stats.add(group=grp, resource=res, count=count)
        return resp
