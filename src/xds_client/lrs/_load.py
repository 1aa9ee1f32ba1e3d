"""What the application records about its requests, per cluster and locality, between two
load reports. Thread-safe, no I/O and no clock: the reporter takes the counts with its
own ``now``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from xds_client.errors import UsageError
from xds_client.node import Locality

__all__ = ["ClusterCounts", "ClusterLoad", "LoadStore", "LocalityCounts", "LocalityLoad"]


@dataclass(frozen=True)
class LocalityCounts:
    """One locality's counts over one report interval."""

    locality: Locality
    """Where the requests went."""
    issued: int = 0
    """Requests started (``LocalityLoad.start``)."""
    succeeded: int = 0
    """Requests that finished without an error."""
    errored: int = 0
    """Requests that finished with an error."""
    in_progress: int = 0
    """Requests started and not finished yet, when the counts were taken (not reset)."""
    loads: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    """Per named load metric: (requests that reported it, sum of the values)."""


@dataclass(frozen=True)
class ClusterCounts:
    """One cluster's counts over one report interval."""

    cluster: str
    """The cluster's name (``ClusterStats.cluster_name``)."""
    service_name: str
    """Its EDS service name (``ClusterStats.cluster_service_name``), ``""`` for none."""
    localities: tuple[LocalityCounts, ...] = ()
    """The localities that had requests, or have some in progress."""
    dropped: Mapping[str, int] = field(default_factory=dict)
    """Requests dropped per category (``""``: dropped without a category)."""

    @property
    def total_dropped(self) -> int:
        """Every drop, with or without a category."""
        return sum(self.dropped.values())

    @property
    def empty(self) -> bool:
        """Nothing happened and nothing is in progress: no report is needed."""
        return not self.localities and not self.dropped


class LocalityLoad:
    """Records the requests one cluster sends to one locality."""

    def __init__(self, lock: threading.Lock, locality: Locality) -> None:
        self._lock = lock
        self.locality = locality
        self._issued = self._succeeded = self._errored = self._in_progress = 0
        self._loads: dict[str, list[float]] = {}

    def start(self) -> None:
        """A request was sent: issued and in progress go up by one."""
        with self._lock:
            self._issued += 1
            self._in_progress += 1

    def finish(self, *, error: bool = False) -> None:
        """A request started with :meth:`start` ended, with an error or without."""
        with self._lock:
            self._in_progress = max(0, self._in_progress - 1)
            if error:
                self._errored += 1
            else:
                self._succeeded += 1

    def record_load(self, name: str, value: float) -> None:
        """A finished request reported ``value`` for the load metric ``name`` (e.g. from
        ORCA); the report carries how many did and the sum."""
        if not name:
            raise UsageError("a load metric needs a name")
        with self._lock:
            entry = self._loads.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += value

    def _take(self) -> LocalityCounts | None:
        """The counts so far, and start over (the lock is held)."""
        busy = self._issued or self._succeeded or self._errored or self._in_progress
        if not busy and not self._loads:
            return None
        counts = LocalityCounts(
            self.locality,
            self._issued,
            self._succeeded,
            self._errored,
            self._in_progress,
            {name: (int(n), total) for name, (n, total) in self._loads.items()},
        )
        self._issued = self._succeeded = self._errored = 0
        self._loads = {}
        return counts


class ClusterLoad:
    """Records one cluster's requests: per locality, and the ones dropped."""

    def __init__(self, lock: threading.Lock, name: str, service_name: str) -> None:
        self._lock = lock
        self.name = name
        self.service_name = service_name
        self._localities: dict[Locality, LocalityLoad] = {}
        self._dropped: Counter[str] = Counter()

    def locality(self, locality: Locality | None = None) -> LocalityLoad:
        """The recorder for requests to ``locality`` (the same object each time)."""
        where = Locality() if locality is None else locality
        with self._lock:
            load = self._localities.get(where)
            if load is None:
                load = self._localities[where] = LocalityLoad(self._lock, where)
            return load

    def drop(self, category: str = "") -> None:
        """A request was dropped before it was sent (``category`` as the EDS policy's
        ``drop_overloads`` names it; ``""`` for a drop without one)."""
        with self._lock:
            self._dropped[category] += 1

    def _take(self) -> ClusterCounts:
        """The counts so far, and start over (the lock is held)."""
        taken = (load._take() for load in self._localities.values())
        localities = tuple(one for one in taken if one is not None)
        counts = ClusterCounts(self.name, self.service_name, localities, dict(self._dropped))
        self._dropped = Counter()
        return counts


class LoadStore:
    """The load an application records, per cluster, until a reporter takes it.

    ``store.cluster("backend").locality(where)`` hands out a recorder; call
    ``start()`` and ``finish()`` around each request. Any thread may record.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clusters: dict[tuple[str, str], ClusterLoad] = {}

    def cluster(self, name: str, service_name: str = "") -> ClusterLoad:
        """The recorder of cluster ``name`` (with its EDS ``service_name``, if any)."""
        if not name:
            raise UsageError("a cluster needs a name")
        with self._lock:
            load = self._clusters.get((name, service_name))
            if load is None:
                load = self._clusters[(name, service_name)] = ClusterLoad(
                    self._lock, name, service_name
                )
            return load

    def take(self, clusters: Collection[str] | None = None) -> list[ClusterCounts]:
        """The counts of the clusters named (None: all) since they were last taken, each
        starting over; empty ones included (see :attr:`ClusterCounts.empty`)."""
        with self._lock:
            return [
                load._take()
                for (name, _), load in self._clusters.items()
                if clusters is None or name in clusters
            ]
