"""AsyncConfigWatch: complete snapshots of one listener's configuration, for asyncio.

Written once for asyncio; ``tools/gen_sync.py`` generates the thread twin
(``_watch.py``, :class:`ConfigWatch`) from it. The watches the graph needs are
opened and closed by :class:`~xds_client.graph._follower._Follower`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator

from xds_client._backends.asyncio import AsyncClosing, AsyncEvent
from xds_client.errors import ClientClosedError, WaitTimeoutError

from ._follower import _Follower, _WatchingClient
from ._snapshot import ConfigSnapshot, ResourceKey
from ._tracker import MAX_AGGREGATE_DEPTH

__all__ = ["AsyncConfigWatch"]

_CLOSED_POLL = 0.25  # seconds between checks that the client is still open


class AsyncConfigWatch(AsyncClosing):
    """Complete snapshots of one listener's configuration, as an async iterator.

    Each item is a :class:`ConfigSnapshot` in which every dependency has arrived or
    is known missing; intermediate states are never shown. When the consumer is
    slower than the updates, only the newest snapshot is kept. Create it inside the
    running loop.
    """

    def __init__(
        self,
        client: _WatchingClient,
        listener: str,
        *,
        max_aggregate_depth: int = MAX_AGGREGATE_DEPTH,
        authority: str | None = None,
    ) -> None:
        self._ready = AsyncEvent()
        self._queue: deque[ConfigSnapshot] = deque(maxlen=1)
        self._closed = False
        self.latest: ConfigSnapshot | None = None
        """The newest snapshot delivered so far."""
        self._follower = _Follower(client, listener, max_aggregate_depth, self._put, authority)

    @property
    def listener_name(self) -> str:
        """The watched listener."""
        return self._follower.tracker.listener_name

    @property
    def subscribed(self) -> frozenset[ResourceKey]:
        """The resources watched right now (they follow the graph)."""
        return self._follower.tracker.subscribed

    def _put(self, snapshot: ConfigSnapshot) -> None:
        self.latest = snapshot
        self._queue.append(snapshot)  # keeps the newest only (maxlen=1)
        self._ready.set()

    async def get(self, timeout: float | None = None) -> ConfigSnapshot:
        """The next snapshot; :class:`WaitTimeoutError` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # Cleared before looking, so a snapshot put after the look sets it again.
            self._ready.clear()
            try:
                return self._queue.popleft()
            except IndexError:
                pass
            if self._closed or self._follower.client_closed():
                raise ClientClosedError("the config watch (or its client) is closed")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WaitTimeoutError(
                    f"no complete config of listener {self.listener_name!r} within "
                    f"{timeout}s; still watching: {sorted(map(str, self.subscribed))}"
                )
            # Wake now and then: a closing client does not call back.
            await self._ready.wait(
                _CLOSED_POLL if remaining is None else min(remaining, _CLOSED_POLL)
            )

    def __aiter__(self) -> AsyncIterator[ConfigSnapshot]:
        return self

    async def __anext__(self) -> ConfigSnapshot:
        try:
            return await self.get()
        except ClientClosedError:
            raise StopAsyncIteration from None

    def close(self) -> None:
        """Close every watch of the graph; iteration ends."""
        self._follower.close()
        self._closed = True
        self._ready.set()

    # begin async-only
    async def aclose(self) -> None:
        """The same as :meth:`close` (one spelling of closing for every async object)."""
        self.close()

    # end async-only

    def __repr__(self) -> str:
        return f"AsyncConfigWatch(listener={self.listener_name!r}, watching={len(self.subscribed)})"
