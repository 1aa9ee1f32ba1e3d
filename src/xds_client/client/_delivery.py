"""Delivery: the events a protocol core emits, handed to the watchers they concern.

One path for every event, live or replayed: :func:`route` decides who gets what,
from what the event carries (its name and, for ``ResourceUpdated`` and
``ResourceRemoved``, the aliases the server gave, so a VHDS watcher of an alias
hears of the removal too). :func:`observe` is the rest of what a live response
means: metrics hooks and logs. Both are pure functions of their arguments; the
session calls them under its lock.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from typing_extensions import ParamSpec

from xds_client.federation import authority_label
from xds_client.protocol import (
    RESPONSE_KEY,
    Event,
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceState,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
)
from xds_client.protocol._events import UpdateBatch

from ._watchers import EventBuffer, Segment, WatchEntry, WatchEvent

if TYPE_CHECKING:
    from ._metrics import MetricsHooks

__all__ = ["hook", "observe", "route"]

log = logging.getLogger("xds_client.client")
_P = ParamSpec("_P")

Entries = Callable[[str], list[WatchEntry[Any]]]
"""The watchers of a type URL."""


def route(events: Iterable[Event | UpdateBatch], entries_of: Entries) -> tuple[EventBuffer, ...]:
    """Hand ``events`` to the watchers (of ``entries_of``) that want them; returns the
    buffers that got some.

    A resource event goes to every watcher of its name or of one of its aliases; a
    :class:`ResponseRejected` to every watcher of a rejected name, and to all of the
    type for errors about the whole response; an :class:`UpdateBatch` (the updates of
    many bare resources of one SotW response) to each watcher as one :class:`Segment`
    of it. Each buffer gets its events in one batch (one lock, one wake-up), in order.
    """
    batches: dict[int, tuple[WatchEntry[Any], list[WatchEvent[Any] | Segment]]] = {}
    watchers: dict[str, list[WatchEntry[Any]]] = {}
    for event in events:
        if type(event) is ResponseAccepted:
            continue  # concerns no watcher
        type_url = event.type_url
        entries = watchers.get(type_url)
        if entries is None:
            entries = watchers[type_url] = entries_of(type_url)
        batched = type(event) is UpdateBatch
        rejected = type(event) is ResponseRejected
        if type(event) is ResourceUpdated:  # the common event: read, not looked up
            name, aliases = event.name, event.aliases
        else:
            name = getattr(event, "name", "")
            aliases = getattr(event, "aliases", ())  # ResourceRemoved carries them too
        for entry in entries:
            item: WatchEvent[Any] | Segment | None = event  # type: ignore[assignment]
            if batched:
                item = _segment_for(entry, event)  # type: ignore[arg-type]
            elif rejected:
                # Errors about the whole response concern every watcher of the type.
                if entry.names is not None and not any(
                    entry.wants(key) or key == RESPONSE_KEY or key.startswith("resources[")
                    for key in event.errors  # type: ignore[union-attr]
                ):
                    item = None
            elif entry.names is not None and not entry.wants(name, aliases):
                item = None
            if item is None:
                continue
            batch = batches.get(entry.id)
            if batch is None:
                batches[entry.id] = (entry, [item])
            else:
                batch[1].append(item)
    buffers = []
    for entry, items in batches.values():
        entry.buffer.put_many(items)
        buffers.append(entry.buffer)
    return tuple(buffers)


def _segment_for(entry: WatchEntry[Any], batch: UpdateBatch) -> Segment | None:
    """What of ``batch`` the watcher ``entry`` wants (None: nothing)."""
    watched = entry.names
    if watched is None:
        return Segment(batch)
    if not entry.has_globs and len(watched) * 8 < len(batch):
        positions = batch.positions()
        index = sorted(positions[n] for n in watched if n in positions)
    else:
        wants = entry.wants
        index = [i for i, name in enumerate(batch.names) if wants(name)]
    return Segment(batch, index) if index else None


def observe(
    events: Iterable[Event | UpdateBatch], server: Callable[[], str],
    metrics: MetricsHooks | None, states_of: Callable[[str], list[ResourceState]],
) -> None:  # fmt: skip
    """Logs and metrics hooks for the events of a live response; ``server()`` names the
    server (asked only when needed), ``states_of`` gives the resource states of a type
    (over every stream carrying it)."""
    touched: set[str] = set()
    for event in events:
        kind = type(event)
        if kind is ResourceUpdated or kind is UpdateBatch:
            touched.add(event.type_url)
        elif type(event) is ResponseAccepted:
            if metrics is not None:
                hook("ack", metrics.ack, event.type_url, server())
                _response_hooks(metrics, event, server())
        elif isinstance(event, ResponseRejected):
            touched.add(event.type_url)
            if metrics is not None:
                hook("nack", metrics.nack, event.type_url, server())
                _response_hooks(metrics, event, server())
            errors = "; ".join(f"{k}: {v}" for k, v in event.errors.items())
            log.warning("rejected %s version %r from %s: %s", event.type_url, event.version,
                        server(), errors)  # fmt: skip
        else:
            touched.add(event.type_url)
            if isinstance(event, (ResourceRemoved, ResourceDoesNotExist, ResourceDeletionIgnored)):
                # Worth a line in the log (an update is not: there can be thousands).
                log.info("%s %s: %s", event.type_url, event.name, type(event).__name__)
    if metrics is None:
        return
    authority_hook = metrics.authority_resources
    for type_url in touched:
        states = states_of(type_url)
        hook("resources", metrics.resources, type_url, dict(Counter(st.status for st in states)))
        if authority_hook is not None:
            by_authority: dict[str, Counter[str]] = {}
            for st in states:
                by_authority.setdefault(authority_label(st.name), Counter())[st.status] += 1
            for label, counts in sorted(by_authority.items()):
                hook("authority_resources", authority_hook, type_url, label, dict(counts))


def _response_hooks(
    metrics: MetricsHooks, event: ResponseAccepted | ResponseRejected, server: str
) -> None:
    """The optional hooks told of each response: ``response`` (with the control plane
    identifier) and ``resource_updates`` (its valid and invalid resources, gRFC A78)."""
    if isinstance(event, ResponseAccepted):
        accepted, invalid = True, 0
    else:
        accepted, invalid = False, event.invalid_resources
    if metrics.response is not None:
        hook("response", metrics.response, event.type_url, server, accepted, event.control_plane)
    if metrics.resource_updates is not None:
        hook("resource_updates", metrics.resource_updates, event.type_url, server,
             event.valid_resources, invalid)  # fmt: skip


def hook(name: str, method: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs) -> None:
    """Call one typed :class:`Metrics` method; a raising hook is logged, never fatal."""
    try:
        method(*args, **kwargs)
    except Exception:
        log.exception("metrics hook %s raised", name)
