"""Deadlines for TTL expiry and does-not-exist timers, without a clock.

The caller passes ``now``; the queue only remembers when each keyed timer is
due. Re-arming or cancelling is O(1) amortised: old heap entries are skipped
lazily and the heap is rebuilt when stale entries dominate.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["DeadlineQueue"]

K = TypeVar("K", bound=Hashable)


class DeadlineQueue(Generic[K]):
    """Keyed deadlines: at most one per key; arming a key again replaces it."""

    __slots__ = ("_armed", "_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K]] = []
        self._armed: dict[K, tuple[float, int]] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._armed)

    @property
    def armed(self) -> dict[K, tuple[float, int]]:
        """The armed keys and their deadlines (read-only; truthy when any is armed)."""
        return self._armed

    def __contains__(self, key: K) -> bool:
        return key in self._armed

    def deadline(self, key: K) -> float | None:
        """When ``key`` is due, or None when it is not armed."""
        armed = self._armed.get(key)
        return None if armed is None else armed[0]

    def arm(self, key: K, deadline: float) -> None:
        """Set (or move) the deadline of ``key``."""
        self._seq += 1
        self._armed[key] = (deadline, self._seq)
        heapq.heappush(self._heap, (deadline, self._seq, key))
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._armed):
            self._compact()

    def cancel(self, key: K) -> None:
        """Forget ``key``; nothing happens when it is not armed."""
        self._armed.pop(key, None)

    def clear(self) -> None:
        """Forget every deadline."""
        self._armed.clear()
        self._heap.clear()

    def armed_keys(self) -> list[K]:
        """Every armed key (a copy, safe to cancel while iterating)."""
        return list(self._armed)

    def next_deadline(self) -> float | None:
        """The earliest armed deadline, or None."""
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            armed = self._armed.get(key)
            if armed is not None and armed[1] == seq:
                return deadline
            heapq.heappop(heap)
        return None

    def pop_due(self, now: float) -> list[K]:
        """Disarm and return every key due at or before ``now``, earliest first."""
        due: list[K] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, seq, key = heapq.heappop(heap)
            armed = self._armed.get(key)
            if armed is not None and armed[1] == seq:
                del self._armed[key]
                due.append(key)
        return due

    def _compact(self) -> None:
        self._heap = [(d, s, k) for k, (d, s) in self._armed.items()]
        heapq.heapify(self._heap)
