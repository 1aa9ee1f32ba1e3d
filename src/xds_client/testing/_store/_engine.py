"""The test ResourceStore's engine: SQLite objects, versions, history, pages, watches.

Everything :class:`~xds_client.testing.ResourceStoreServer` serves is decided here,
under one lock; the gRPC servicers (:mod:`._servicers`) translate calls to it, the
server (``testing/_store_server.py``) adds the gRPC server's lifecycle.
"""

from __future__ import annotations

import base64
import binascii
import collections
import contextlib
import heapq
import itertools
import json
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec

import grpc

from xds_client.errors import UsageError, WaitTimeoutError
from xds_client.store import _dialect
from xds_client.store._dialect import Dialect, ListSource
from xds_client.store._errors import pack_status_details
from xds_client.store._keys import ResourceKey
from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._selector import Requirement, matches
from xds_client.testing._store._search import (
    SEARCH_BACKFILL,
    SEARCH_SCHEMA,
)

from ._faults import _HTTP_TO_GRPC, _Failure, _Fault

__all__ = ["StoreEngine", "key_errors"]

_DEFAULT_LIMIT = 50
_MAX_LIMIT = 1 << 62
"""Larger limits (``2**63 - 1`` means "no limit" to some clients) are clamped: SQLite's
LIMIT is a signed 64-bit integer and the page query asks for ``limit + 1`` rows."""
_MAX_PAGE_BYTES = 2 * 1024 * 1024

# Grafana's name rules (pkg/apimachinery/validation): lengths are in bytes, and
# Go's regexp "$" only matches at the very end (hence fullmatch).
_GRAFANA_NAME = re.compile(r"[a-zA-Z0-9:\-_.]*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_RESOURCE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]*")


def key_errors(key: pb.ResourceKey, *, need_name: bool = True) -> list[str]:
    """Why Grafana would reject this key (empty when it is valid)."""
    errs: list[str] = []
    name_len = len(key.name.encode())
    if need_name or key.name:
        if name_len == 0:
            errs.append("name may not be empty")
        elif name_len > 253:
            errs.append("name is too long")
        elif not _GRAFANA_NAME.fullmatch(key.name):
            errs.append("name must consist of alphanumeric characters, '-', '_', ':' or '.'")
    for what, value, low, high, pattern in (
        ("namespace", key.namespace, 3, 40, _QUALIFIED_NAME),
        ("group", key.group, 3, 60, _QUALIFIED_NAME),
        ("resource", key.resource, 3, 40, _RESOURCE_NAME),
    ):
        size = len(value.encode())
        if what == "namespace" and size == 0:
            continue  # cluster-scoped
        if size > high:
            errs.append(f"{what} is too long")
        elif size < low:
            errs.append(f"{what} is too short")
        elif not pattern.fullmatch(value):
            errs.append(f"{what} {value!r} has invalid characters")
    return errs


_P = ParamSpec("_P")


def _in_transaction(
    fn: Callable[Concatenate[StoreEngine, _P], int],
) -> Callable[Concatenate[StoreEngine, _P], int]:
    """Run a write (the object and its event) as one SQLite transaction."""

    def run(self: StoreEngine, /, *args: _P.args, **kwargs: _P.kwargs) -> int:
        with self._transaction():
            return fn(self, *args, **kwargs)

    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return run


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_WATCH_BATCH = 500

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    grp TEXT NOT NULL, res TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
    rv INTEGER NOT NULL, uid TEXT NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY (grp, res, ns, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    rv INTEGER PRIMARY KEY, grp TEXT NOT NULL, res TEXT NOT NULL, ns TEXT NOT NULL,
    name TEXT NOT NULL, type INTEGER NOT NULL, value BLOB NOT NULL,
    prev_rv INTEGER NOT NULL, prev_value BLOB
);
CREATE INDEX IF NOT EXISTS events_by_key ON events (grp, res, ns, name, rv);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
"""


@dataclass(eq=False)
class _Watcher:
    flag: str | None = None  # "drop" or "end", set by fault injection
    bookmark: bool = False
    cancelled: bool = False


@dataclass
class _Prefix:
    group: str
    resource: str
    namespace: str
    labels: tuple[Requirement, ...] = field(default=())

    def where(self, *, by_rv: bool = False) -> tuple[str, list[Any]]:
        # "+column" keeps SQLite off the key index when another range is the
        # selective part (events newer than a version are few).
        clauses, args = [], []
        for column, value in (("grp", self.group), ("res", self.resource), ("ns", self.namespace)):
            if value:
                plus = "+" if by_rv else ""
                clauses.append(f"{plus}{column} = ?")
                args.append(value)
        return (" AND ".join(clauses) or "1"), args


def _labels(value: bytes | None) -> Mapping[str, str]:
    if not value:
        return {}
    try:
        doc = json.loads(value)
    except ValueError:
        return {}
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


class StoreEngine:
    """The store behind :class:`StoreEngine`: the SQLite database (objects,
    versions, history, list pages, the search index), the open watches and the queue of
    injected faults. The servicers (:mod:`._servicers`) call it under its lock.
    """

    def __init__(
        self,
        db: str | None = None,
        *,
        history_size: int = 100_000,
        errors_as_details: bool = False,
        filter_labels: bool = True,
        dialect: Dialect | str = Dialect.GRAFANA,
        max_page_bytes: int = _MAX_PAGE_BYTES,
        search: bool = True,
        quotas: Mapping[str, int] | None = None,
    ) -> None:
        self.history_size = history_size
        """How many events the history keeps; a watch from before that is 410 Expired."""
        self.errors_as_details = errors_as_details
        """Send errors as ``google.rpc.Status`` details (gRPC status) instead of in responses."""
        self.filter_labels = filter_labels
        """Apply label selectors on the server (turn off to test client-side filtering)."""
        self.dialect = Dialect.of(dialect)
        """The wire dialect served (today's Grafana by default)."""
        self.max_page_bytes = max_page_bytes
        """A list page ends once its values reach this many bytes (Grafana: 2 MiB)."""
        self.search = search and self.dialect is Dialect.GRAFANA
        """Serve ResourceIndex (Search, GetStats) over an FTS5 index kept by triggers.

        The index costs writes some time (about 15% on bulk loads); turn it off
        for write-heavy tests. The seed dialect has no search."""
        self.quotas = None if quotas is None else dict(quotas)
        """Objects each collection of a namespace may hold (``"*"``: others); None: no quotas."""
        self.initial_event_delay = 0.0
        """Seconds to wait before each initial watch event (holds a stream mid-way)."""
        self.calls: collections.Counter[str] = collections.Counter()
        """How many times each method was called."""
        self._db_path = db or ":memory:"
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._conn: sqlite3.Connection | None = None
        self._rv = 0
        self._compacted_rv = 0
        self._watchers: list[_Watcher] = []
        self._faults: list[_Fault] = []
        self._closed = False

    @property
    def resource_version(self) -> int:
        """The latest resource version of the store."""
        with self._lock:
            return self._rv

    def _open_db(self) -> None:
        conn = sqlite3.connect(
            self._db_path, check_same_thread=False, isolation_level=None, timeout=0.2
        )
        if self._db_path != ":memory:":
            # One server per file: a second one would hand out duplicate versions.
            # The exclusive lock is taken now and held until the connection closes.
            try:
                conn.execute("PRAGMA locking_mode=EXCLUSIVE")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("BEGIN EXCLUSIVE")
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                conn.close()
                raise UsageError(
                    f"the SQLite file {self._db_path!r} is in use by another StoreEngine ({exc})"
                ) from None
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(_SCHEMA)
        if self.search:
            conn.executescript(SEARCH_SCHEMA)
            conn.executescript(SEARCH_BACKFILL)
        self._conn = conn
        # The version counter survives restarts of a file database: the newest of the
        # recorded events, the stored objects and the compaction point.
        row = conn.execute(
            "SELECT MAX(v) FROM (SELECT MAX(rv) AS v FROM events UNION ALL "
            "SELECT MAX(rv) FROM objects UNION ALL SELECT v FROM meta WHERE k = 'compacted')"
        ).fetchone()
        self._rv = int(row[0]) if row and row[0] is not None else 0
        row = conn.execute("SELECT v FROM meta WHERE k = 'compacted'").fetchone()
        self._compacted_rv = int(row[0]) if row else 0
        self._closed = False

    # ------------------------------------------------------------ fault injection

    def drop_watches(self) -> int:
        """Abort every open watch stream with UNAVAILABLE; returns how many."""
        return self._flag_watchers("drop")

    def end_watches(self) -> int:
        """End every open watch stream cleanly (status OK); returns how many."""
        return self._flag_watchers("end")

    def send_bookmarks(self) -> int:
        """Send a bookmark at the current resource version to every open watch."""
        with self._cond:
            for w in self._watchers:
                w.bookmark = True
            self._cond.notify_all()
            return len(self._watchers)

    def fail_next(
        self,
        n: int,
        code: grpc.StatusCode | int = grpc.StatusCode.UNAVAILABLE,
        *,
        retry_after: int = 0,
        methods: Sequence[str] | None = None,
    ) -> None:
        """Fail the next ``n`` calls (of ``methods``, default all).

        A ``grpc.StatusCode`` fails the call with that status and no details (like
        a transport error); an int is an HTTP-style code delivered as an
        ``ErrorResult`` (in the response, or as details with ``errors_as_details``).
        """
        with self._lock:
            self._faults.append(
                _Fault(n, code, retry_after, frozenset(methods) if methods else None)
            )

    def compact(self, keep: int = 0) -> None:
        """Forget all but the newest ``keep`` events: older ``since`` values become 410."""
        with self._cond:
            self._compact_to(self._rv - keep)

    @property
    def watch_count(self) -> int:
        """How many watch streams are open now."""
        with self._lock:
            return len(self._watchers)

    def wait_for_watchers(self, n: int = 1, timeout: float = 5.0) -> None:
        """Block until at least ``n`` watch streams are open."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._watchers) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeoutError(f"{len(self._watchers)} watchers open, wanted {n}")
                self._cond.wait(min(left, 0.05))

    # ------------------------------------------------------------ direct writes

    def put(self, key: ResourceKey, value: Mapping[str, Any] | bytes) -> int:
        """Create or overwrite an object without going through gRPC; returns its version."""
        raw = value if isinstance(value, bytes) else json.dumps(value).encode()
        with self._cond:
            wire = key.to_proto()
            row = self._get(wire)
            if row is None:
                return self._write_create(wire, raw, checked=True)
            return self._write_update(wire, raw, 0, row=row)

    def put_many(self, items: Sequence[tuple[ResourceKey, Mapping[str, Any] | bytes]]) -> int:
        """:meth:`put` many objects in one transaction; returns the last version."""
        rv = 0
        with self._cond, self._transaction():
            for key, value in items:
                rv = self.put(key, value)
        return rv

    def remove(self, key: ResourceKey) -> int:
        """Delete an object without going through gRPC; returns the deletion's version."""
        with self._cond:
            return self._write_delete(key.to_proto(), 0, "")

    # ------------------------------------------------------------ internals

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One SQLite transaction (nested uses join the outer one); rolls back on failure."""
        db = self._db
        if db.in_transaction:
            yield
            return
        rv, compacted = self._rv, self._compacted_rv
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK")
            self._rv, self._compacted_rv = rv, compacted
            raise
        db.execute("COMMIT")

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise _Failure(503, "ServiceUnavailable", "the store is closed")
        return self._conn

    def _flag_watchers(self, flag: str) -> int:
        with self._cond:
            for w in self._watchers:
                w.flag = flag
            self._cond.notify_all()
            return len(self._watchers)

    def _take_fault(self, method: str) -> _Fault | None:
        with self._lock:
            self.calls[method] += 1
            for fault in self._faults:
                if fault.methods is None or method in fault.methods:
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _names(self, prefix: ResourceKey) -> list[tuple[str, str, str, str]]:
        rows = self._db.execute(
            "SELECT grp, res, ns, name FROM objects WHERE grp=? AND res=? AND ns=?",
            (prefix.group, prefix.resource, prefix.namespace),
        ).fetchall()
        return [(str(a), str(b), str(c), str(d)) for a, b, c, d in rows]

    def _count(self, prefix: ResourceKey) -> int:
        return len(self._names(prefix))

    def _get(self, key: pb.ResourceKey) -> tuple[int, str, bytes] | None:
        row = self._db.execute(
            "SELECT rv, uid, value FROM objects WHERE grp=? AND res=? AND ns=? AND name=?",
            (key.group, key.resource, key.namespace, key.name),
        ).fetchone()
        return (int(row[0]), str(row[1]), bytes(row[2])) if row else None

    def _prepare(self, key: pb.ResourceKey, value: bytes, rv: int, uid: str) -> bytes:
        if not key.group or not key.resource:
            raise _Failure(400, "BadRequest", "group and resource are required", key=key)
        if not key.name:
            raise _Failure(400, "BadRequest", "name is required", key=key)
        errs = key_errors(key)
        if errs:
            raise _Failure(
                400,
                "BadRequest",
                f"invalid key for {key.resource} {key.name!r}: " + "; ".join(errs),
                key=key,
            )
        try:
            doc = json.loads(value, parse_constant=_reject_constant)
        except ValueError as exc:
            raise _Failure(400, "BadRequest", f"value is not JSON: {exc}", key=key) from None
        except RecursionError:
            raise _Failure(400, "BadRequest", "value is nested too deeply", key=key) from None
        if not isinstance(doc, dict):
            raise _Failure(400, "BadRequest", "value must be a JSON object", key=key)
        meta = doc.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise _Failure(422, "Invalid", "metadata must be an object", key=key)
        causes = []
        if meta.get("name", key.name) != key.name:
            causes.append(
                pb.ErrorCause(
                    reason="FieldValueInvalid",
                    message=f"must match the key's name {key.name!r}",
                    field="metadata.name",
                )
            )
        if meta.get("namespace", key.namespace) != key.namespace:
            causes.append(
                pb.ErrorCause(
                    reason="FieldValueInvalid",
                    message=f"must match the key's namespace {key.namespace!r}",
                    field="metadata.namespace",
                )
            )
        labels = meta.get("labels", {})
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            causes.append(
                pb.ErrorCause(
                    reason="FieldValueInvalid",
                    message="labels must map strings to strings",
                    field="metadata.labels",
                )
            )
        if causes:
            raise _Failure(
                422, "Invalid", f"{key.resource} {key.name!r} is invalid", key=key, causes=causes
            )
        meta["name"] = key.name
        if key.namespace:
            meta["namespace"] = key.namespace
        meta["uid"] = uid
        meta["resourceVersion"] = str(rv)
        return json.dumps(doc, separators=(",", ":")).encode()

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _record(  # noqa: PLR0917 - one column each
        self,
        key: pb.ResourceKey,
        rv: int,
        etype: int,
        value: bytes,
        prev_rv: int,
        prev_value: bytes | None,
    ) -> None:
        db = self._db
        db.execute(
            "INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?)",
            (
                rv,
                key.group,
                key.resource,
                key.namespace,
                key.name,
                etype,
                value,
                prev_rv,
                prev_value,
            ),
        )
        # Compact in steps so a long run does not pay a DELETE per write.
        if rv - self._compacted_rv > self.history_size + max(16, self.history_size // 8):
            self._compact_to(rv - self.history_size)
        self._cond.notify_all()

    def _compact_to(self, rv: int) -> None:
        if rv <= self._compacted_rv:
            return
        self._db.execute("DELETE FROM events WHERE rv <= ?", (rv,))
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('compacted', ?)", (rv,))
        self._compacted_rv = rv

    @_in_transaction
    def _write_create(self, key: pb.ResourceKey, value: bytes, *, checked: bool = False) -> int:
        if not checked and self._get(key) is not None:
            raise _Failure(
                409, "AlreadyExists", f"{key.resource} {key.name!r} already exists", key=key
            )
        rv = self._rv + 1
        uid = str(uuid.uuid4())
        stored = self._prepare(key, value, rv, uid)
        self._next_rv()
        self._db.execute(
            "INSERT INTO objects VALUES (?,?,?,?,?,?,?)",
            (key.group, key.resource, key.namespace, key.name, rv, uid, stored),
        )
        self._record(key, rv, pb.WatchEvent.ADDED, stored, 0, None)
        return rv

    @_in_transaction
    def _write_update(
        self,
        key: pb.ResourceKey,
        value: bytes,
        expected_rv: int,
        *,
        row: tuple[int, str, bytes] | None = None,
    ) -> int:
        row = row or self._get(key)
        if row is None:
            raise _Failure(404, "NotFound", f"{key.resource} {key.name!r} not found", key=key)
        old_rv, uid, old_value = row
        if expected_rv and expected_rv != old_rv:
            raise _Failure(
                409,
                "Conflict",
                f"the object has been modified (version {old_rv}, request has {expected_rv})",
                key=key,
            )
        rv = self._rv + 1
        stored = self._prepare(key, value, rv, uid)
        self._next_rv()
        self._db.execute(
            "UPDATE objects SET rv=?, value=? WHERE grp=? AND res=? AND ns=? AND name=?",
            (rv, stored, key.group, key.resource, key.namespace, key.name),
        )
        self._record(key, rv, pb.WatchEvent.MODIFIED, stored, old_rv, old_value)
        return rv

    @_in_transaction
    def _write_delete(self, key: pb.ResourceKey, expected_rv: int, uid: str) -> int:
        row = self._get(key)
        if row is None:
            raise _Failure(404, "NotFound", f"{key.resource} {key.name!r} not found", key=key)
        old_rv, old_uid, old_value = row
        if expected_rv and expected_rv != old_rv:
            raise _Failure(
                409,
                "Conflict",
                f"the object has been modified (version {old_rv}, request has {expected_rv})",
                key=key,
            )
        if uid and uid != old_uid:
            raise _Failure(409, "Conflict", f"uid precondition failed: {uid!r}", key=key)
        rv = self._next_rv()
        self._db.execute(
            "DELETE FROM objects WHERE grp=? AND res=? AND ns=? AND name=?",
            (key.group, key.resource, key.namespace, key.name),
        )
        self._record(key, rv, pb.WatchEvent.DELETED, old_value, old_rv, old_value)
        return rv

    def _read(self, key: pb.ResourceKey, at_rv: int) -> tuple[int, bytes]:
        """The object now (``at_rv`` 0), or as it was at version ``at_rv``."""
        missing = _Failure(404, "NotFound", f"{key.resource} {key.name!r} not found", key=key)
        if at_rv > self._rv:
            raise _Failure(400, "BadRequest", f"resource version {at_rv} is in the future")
        row = self._get(key)
        if at_rv == 0 or (row is not None and row[0] <= at_rv):
            if row is None:
                raise missing
            return row[0], row[2]
        # The newest write of this key at or before at_rv, from the history.
        found = self._db.execute(
            "SELECT type, rv, value FROM events WHERE grp=? AND res=? AND ns=? AND name=? "
            "AND rv <= ? ORDER BY rv DESC LIMIT 1",
            (key.group, key.resource, key.namespace, key.name, at_rv),
        ).fetchone()
        if found is None and at_rv <= self._compacted_rv:
            raise _Failure(410, "Expired", f"resource version {at_rv} is too old", key=key)
        if found is None or found[0] == pb.WatchEvent.DELETED:
            raise missing
        return int(found[1]), bytes(found[2])

    def _list_page(self, req: pb.ListRequest) -> pb.ListResponse:
        source = _dialect.requested_source(req, self.dialect)
        if source is not ListSource.STORE:
            return self._list_events(req, source)
        opts = req.options
        prefix = _Prefix(opts.key.group, opts.key.resource, opts.key.namespace)
        limit = min(req.limit, _MAX_LIMIT) if req.limit > 0 else _DEFAULT_LIMIT
        after: tuple[str, str, str, str] = ("", "", "", "")
        if self._rv == 0:
            # Grafana's versions are never 0: a list of a store never written to is at
            # version 1 (a version without an event), so the first write is 2 and a
            # watch from the list's version sees it.
            self._rv = 1
        if req.next_page_token:
            list_rv, after = _decode_token(req.next_page_token, prefix)
            if req.resource_version and req.resource_version != list_rv:
                # As Grafana: a token continues the list it came from, at its version.
                raise _Failure(
                    400,
                    "BadRequest",
                    f"the page token continues a list at resource version {list_rv}, "
                    f"not {req.resource_version}",
                )
        else:
            list_rv = self._rv
            if req.resource_version and _dialect.wants_exact(req, self.dialect):
                list_rv = req.resource_version
        if list_rv > self._rv:
            raise _Failure(400, "BadRequest", f"resource version {list_rv} is in the future")
        # Later pages are served from the store as it was at list_rv: unchanged
        # objects, plus the previous state of anything written since.
        if list_rv < self._rv and list_rv < self._compacted_rv:
            raise _Failure(
                410,
                "Expired",
                f"resource version {list_rv} is older than the kept history; list again",
            )
        # Objects unchanged since list_rv, in key order: the query must let SQLite
        # walk the primary key from the token's position (no sort, no rescan).
        if prefix.group and prefix.resource:
            ns_clause, ns_args = (
                ("AND +ns = ?", [prefix.namespace]) if prefix.namespace else ("", [])
            )
            unchanged = self._db.execute(
                f"SELECT grp, res, ns, name, rv, value FROM objects "
                f"WHERE grp = ? AND res = ? {ns_clause} AND rv <= ? AND (ns, name) > (?, ?) "
                f"ORDER BY grp, res, ns, name LIMIT ?",
                (prefix.group, prefix.resource, *ns_args, list_rv, after[2], after[3], limit + 1),
            ).fetchall()
        else:
            where, args = prefix.where(by_rv=True)
            unchanged = self._db.execute(
                f"SELECT grp, res, ns, name, rv, value FROM objects "
                f"WHERE {where} AND rv <= ? AND (grp, res, ns, name) > (?, ?, ?, ?) "
                f"ORDER BY grp, res, ns, name LIMIT ?",
                (*args, list_rv, *after, limit + 1),
            ).fetchall()
        # ... merged with the state at list_rv of objects written since (few).
        where_rv, args_rv = prefix.where(by_rv=True)
        first_after: dict[tuple[str, str, str, str], Any] = {}
        for row in self._db.execute(
            f"SELECT grp, res, ns, name, prev_rv, prev_value FROM events "
            f"WHERE rv > ? AND {where_rv} ORDER BY rv",
            (list_rv, *args_rv),
        ):
            k = (row[0], row[1], row[2], row[3])
            if k > after and k not in first_after:
                first_after[k] = row
        restored = sorted(row for row in first_after.values() if row[4] > 0)
        rows = list(itertools.islice(heapq.merge(unchanged, restored), limit + 1))
        reqs = tuple(Requirement.from_proto(r) for r in opts.labels)
        names = _field_names(opts.fields)
        resp = pb.ListResponse(resource_version=list_rv)
        items = resp.items
        page_bytes = 0
        taken = 0
        for row in rows[:limit]:
            taken += 1
            value = row[5]
            if names is not None and row[3] not in names:
                continue
            if reqs and self.filter_labels and not matches(reqs, _labels(value)):
                continue
            items.add(resource_version=row[4], value=value)
            # As Grafana: a page also ends once its values reach the byte budget.
            page_bytes += len(value)
            if page_bytes >= self.max_page_bytes:
                break
        more = len(rows) > taken
        rows = rows[:taken]
        if more:
            last = rows[-1]
            resp.next_page_token = _encode_token(
                list_rv, (last[0], last[1], last[2], last[3]), prefix
            )
        return resp

    def _list_events(self, req: pb.ListRequest, source: ListSource) -> pb.ListResponse:
        """History (every kept version of one object, newest first) or trash
        (the last version of each deleted object that was not recreated)."""
        key = req.options.key
        prefix = _Prefix(key.group, key.resource, key.namespace)
        limit = min(req.limit, _MAX_LIMIT) if req.limit > 0 else _DEFAULT_LIMIT
        before = self._rv + 1
        if req.next_page_token:
            try:
                before = int(base64.urlsafe_b64decode(req.next_page_token.encode()))
            except (ValueError, binascii.Error):
                raise _Failure(400, "BadRequest", "invalid page token") from None
        where, args = prefix.where(by_rv=True)
        if source is ListSource.HISTORY:
            if not key.name:
                raise _Failure(400, "BadRequest", "a history list needs the object's name")
            rows = self._db.execute(
                f"SELECT rv, value FROM events WHERE {where} AND name = ? AND type != ? "
                f"AND rv < ? ORDER BY rv DESC LIMIT ?",
                (*args, key.name, pb.WatchEvent.DELETED, before, limit + 1),
            ).fetchall()
        else:
            rows = self._db.execute(
                f"SELECT e.rv, e.value FROM events AS e WHERE {where} AND e.type = ? "
                f"AND e.rv < ? AND NOT EXISTS (SELECT 1 FROM objects AS o WHERE "
                f"o.grp = e.grp AND o.res = e.res AND o.ns = e.ns AND o.name = e.name) "
                f"AND e.rv = (SELECT MAX(rv) FROM events AS l WHERE l.grp = e.grp AND "
                f"l.res = e.res AND l.ns = e.ns AND l.name = e.name) "
                f"ORDER BY e.rv DESC LIMIT ?",
                (*args, pb.WatchEvent.DELETED, before, limit + 1),
            ).fetchall()
        resp = pb.ListResponse(resource_version=self._rv)
        for rv, value in rows[:limit]:
            resp.items.add(resource_version=int(rv), value=bytes(value))
        if len(rows) > limit:
            resp.next_page_token = base64.urlsafe_b64encode(
                str(rows[limit - 1][0]).encode()
            ).decode()
        return resp

    def _events_after(self, prefix: _Prefix, after: int) -> tuple[list[Any], int]:
        """Events newer than ``after`` for a prefix, and how far the search got."""
        where, args = prefix.where(by_rv=True)
        rows = self._db.execute(
            f"SELECT rv, type, value, prev_rv, prev_value FROM events "
            f"WHERE rv > ? AND {where} ORDER BY rv LIMIT {_WATCH_BATCH}",
            (after, *args),
        ).fetchall()
        reached = rows[-1][0] if len(rows) == _WATCH_BATCH else self._rv
        return rows, reached

    def _snapshot(self, prefix: _Prefix) -> list[Any]:
        where, args = prefix.where()
        return self._db.execute(
            f"SELECT rv, value FROM objects WHERE {where} ORDER BY ns, name", args
        ).fetchall()

    def _deliver(self, context: grpc.ServicerContext, failure: _Failure) -> None:
        """Abort the call with the failure as status details (only in that mode)."""
        code = _HTTP_TO_GRPC.get(failure.result.code, grpc.StatusCode.INTERNAL)
        if failure.result.reason == "AlreadyExists":
            code = grpc.StatusCode.ALREADY_EXISTS
        context.set_trailing_metadata(
            (("grpc-status-details-bin", pack_status_details(failure.result, code)),)
        )
        context.abort(code, failure.result.message)

    def _fault_failure(self, context: grpc.ServicerContext, method: str) -> _Failure | None:
        fault = self._take_fault(method)
        if fault is None:
            return None
        if isinstance(fault.code, grpc.StatusCode):
            context.abort(fault.code, f"injected fault: {fault.code.name}")
        reasons = {429: "TooManyRequests", 503: "ServiceUnavailable", 410: "Expired"}
        return _Failure(
            fault.code,
            reasons.get(fault.code, "InternalError"),
            f"injected fault {fault.code}",
            retry_after=fault.retry_after,
        )


def _field_names(fields: Sequence[pb.Requirement]) -> set[str] | None:
    """The names a ``metadata.name`` field selector allows (None: no such selector)."""
    names: set[str] | None = None
    for req in fields:
        if req.key != "metadata.name" or req.operator not in ("=", "==", "in"):
            continue  # best effort, as Grafana: the client filters again
        allowed = set(req.values)
        names = allowed if names is None else names & allowed
    return names


def _encode_token(list_rv: int, after: tuple[str, str, str, str], prefix: _Prefix) -> str:
    doc = {
        "rv": list_rv,
        "after": list(after),
        "k": [prefix.group, prefix.resource, prefix.namespace],
    }
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()


def _decode_token(token: str, prefix: _Prefix) -> tuple[int, tuple[str, str, str, str]]:
    try:
        doc = json.loads(base64.urlsafe_b64decode(token.encode()))
        list_rv = int(doc["rv"])
        grp, res, ns, name = doc["after"]
        k = doc["k"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise _Failure(400, "BadRequest", "invalid page token") from None
    if k != [prefix.group, prefix.resource, prefix.namespace]:
        raise _Failure(400, "BadRequest", "the page token belongs to another list")
    return list_rv, (str(grp), str(res), str(ns), str(name))


def _now_ms() -> int:
    return int(time.time() * 1000)
