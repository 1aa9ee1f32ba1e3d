"""BulkProcess (today's Grafana): write a whole collection in one client stream.

Shared by both clients and the test server: requests, the ``x-gf-batch-*``
settings that travel as gRPC metadata, and the typed result. Grafana accepts
only a *rebuild* of a collection (one namespace, group and resource): when the
stream completes, the collection holds exactly the objects sent, in one
transaction, and watchers see the events then. Any invalid item rolls back
the whole batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from xds_client.errors import UsageError
from xds_client.store._dialect import Dialect
from xds_client.store._errors import check_result
from xds_client.store._keys import ResourceKey, Value, encode_value, require_name
from xds_client.store._proto import resource_pb2 as pb

__all__ = ["BulkItem", "BulkResult", "BulkSummary", "BulkRejected"]

COLLECTION_KEY = "x-gf-batch-collection"
REBUILD_KEY = "x-gf-batch-rebuild-collection"
SKIP_VALIDATION_KEY = "x-gf-batch-skip-validation"

BulkAction = Literal["added", "modified", "deleted"]
_ACTIONS: dict[str, pb.BulkRequest.Action.ValueType] = {
    "added": pb.BulkRequest.ADDED,
    "modified": pb.BulkRequest.MODIFIED,
    "deleted": pb.BulkRequest.DELETED,
}
_ACTION_NAMES = {v: k for k, v in _ACTIONS.items()}


@dataclass(frozen=True, slots=True)
class BulkItem:
    """One write of a bulk stream."""

    key: ResourceKey
    """The full key; every item of a stream is in the same collection."""
    value: Value = b""
    """JSON bytes or a mapping (as ``create`` takes); unused for ``deleted``."""
    action: BulkAction = "added"
    """``added``, ``modified`` or ``deleted``."""
    folder: str = ""
    """The folder hint Grafana uses for access checks."""


@dataclass(frozen=True, slots=True)
class BulkSummary:
    """What a bulk stream did to one collection."""

    collection: ResourceKey
    """Namespace, group and resource (no name)."""
    count: int
    """Objects in the collection afterwards."""
    previous_count: int
    """Objects in it before."""
    resource_version: int
    """The highest version the stream wrote."""
    history: int = 0
    """Kept history entries, when the server reports them."""


@dataclass(frozen=True, slots=True)
class BulkRejected:
    """An item the server refused (the batch was rolled back)."""

    key: ResourceKey
    """Its key."""
    action: str
    """Its action."""
    error: str
    """Why."""


@dataclass(frozen=True, slots=True)
class BulkResult:
    """The answer to a bulk stream."""

    processed: int
    """How many items the server processed."""
    summary: tuple[BulkSummary, ...]
    """One entry per collection."""
    rejected: tuple[BulkRejected, ...]
    """Refused items (empty on success)."""


def collection_id(key: ResourceKey) -> str:
    """Grafana's ``SearchID`` of a collection: ``namespace/group/resource``."""
    return f"{key.namespace}/{key.group}/{key.resource}"


def parse_collection_id(text: str) -> ResourceKey:
    """The collection named by :func:`collection_id` (a ``UsageError`` when malformed)."""
    parts = text.split("/")
    if len(parts) not in (3, 4) or not parts[1] or not parts[2]:
        raise UsageError(f"invalid collection {text!r}; want namespace/group/resource")
    return ResourceKey(parts[1], parts[2], parts[0])


def settings_metadata(
    collection: ResourceKey, *, rebuild: bool, skip_validation: bool = False
) -> list[tuple[str, str]]:
    """The gRPC metadata that tells the server what the stream writes."""
    md = [(COLLECTION_KEY, collection_id(collection))]
    if rebuild:
        md.append((REBUILD_KEY, "true"))
    if skip_validation:
        md.append((SKIP_VALIDATION_KEY, "true"))
    return md


def check_rebuild(collection: ResourceKey, rebuild: bool) -> None:
    """Refuse a bulk that is not a rebuild: no Grafana version does what it would promise.

    Grafana's BulkProcess clears the collection and writes the items whatever the
    flag says (older versions answer 400 without it), so ``rebuild=False`` would
    delete every object not in the stream while looking like an upsert.
    """
    if not rebuild:
        raise UsageError(
            f"bulk({collection_id(collection)}) with rebuild=False: Grafana's bulk always "
            "replaces the whole collection (older versions refuse it with 400); pass "
            "rebuild=True and every object the collection should keep, or write single "
            "objects with create/update/delete"
        )


def check_dialect(dialect: Dialect, what: str = "bulk") -> None:
    """BulkStore and ResourceIndex exist only in today's Grafana."""
    if dialect is Dialect.SEED:
        raise UsageError(f"{what} needs the 'grafana' dialect (the seed proto has no {what})")


def requests(
    collection: ResourceKey, items: Iterable[BulkItem | tuple[ResourceKey, Value]]
) -> Iterator[pb.BulkRequest]:
    """The stream's requests, built lazily (a large bulk never sits in memory at once)."""
    want = collection.prefix()
    for raw in items:
        item = raw if isinstance(raw, BulkItem) else BulkItem(raw[0], raw[1])
        require_name(item.key)
        if item.key.prefix() != want:
            raise UsageError(f"{item.key} is not in the bulk's collection {want}")
        action = _ACTIONS.get(item.action)
        if action is None:
            raise UsageError(f"unknown bulk action {item.action!r}; use {sorted(_ACTIONS)}")
        value = b"" if item.action == "deleted" else encode_value(item.key, item.value)
        yield pb.BulkRequest(
            key=item.key.to_proto(), action=action, value=value, folder=item.folder
        )


def result(resp: pb.BulkResponse, trailing: Any) -> BulkResult:
    """Raise the typed error of a failed bulk, or return its result."""
    check_result(resp.error if resp.HasField("error") else None, trailing)
    return BulkResult(
        processed=resp.processed,
        summary=tuple(
            BulkSummary(
                ResourceKey(s.group, s.resource, s.namespace),
                s.count,
                s.previous_count,
                s.resource_version,
                s.history,
            )
            for s in resp.summary
        ),
        rejected=tuple(
            BulkRejected(
                ResourceKey.from_proto(r.key), _ACTION_NAMES.get(r.action, "unknown"), r.error
            )
            for r in resp.rejected
        ),
    )


class RequestFeed:
    """The request iterator handed to gRPC; keeps our own error (gRPC would hide it)."""

    def __init__(self, requests: Iterator[pb.BulkRequest]) -> None:
        self._requests = requests
        self.error: BaseException | None = None
        """What made the iterator stop early (a bad item), raised instead of gRPC's CANCELLED."""

    def __iter__(self) -> Iterator[pb.BulkRequest]:
        try:
            yield from self._requests
        except Exception as exc:
            self.error = exc
            raise
