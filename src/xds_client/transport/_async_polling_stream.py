"""AsyncPollingStream: an :class:`~xds_client.transport.AsyncStream` made of polls.

Written once for asyncio; ``tools/gen_sync.py`` generates the thread twin
(``_polling_stream.py``) from it. The scheduling rules are in
:class:`~xds_client.transport._polling.PollScheduler`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable

from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

from xds_client._backends.asyncio import AsyncCondition
from xds_client.errors import TransportError
from xds_client.transport._base import Request
from xds_client.transport._polling import (
    AsyncPoster,
    PollPolicy,
    PollScheduler,
    as_poll_error,
    wait_time,
)

__all__ = ["AsyncPollingStream"]


class AsyncPollingStream:
    """A stream made of polls: ``recv`` performs the due polls in its caller.

    ``send`` only records the request and wakes ``recv``, so it never waits on the
    network.
    """

    def __init__(
        self,
        poster: AsyncPoster,
        policy: PollPolicy,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._poster = poster
        self._scheduler = PollScheduler(policy, rng=rng)
        self._on_close = on_close
        self._clock = clock
        self._cond = AsyncCondition()
        self._closed = False
        self._error: TransportError | None = None

    async def send(self, request: Request) -> None:
        """Record the request; a changed subscription is polled on the next ``recv``."""
        async with self._cond:
            self._check_open()
            self._scheduler.submit(request, self._clock())
            self._cond.notify_all()

    async def recv(self, timeout: float | None) -> DiscoveryResponse | None:
        """Poll what is due until a changed response arrives or ``timeout`` passes."""
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            async with self._cond:
                self._check_open()
                now = self._clock()
                call = self._scheduler.take_due(now)
                if call is None:
                    wait = wait_time(now, self._scheduler.next_due(), deadline)
                    if wait is not None and wait <= 0:
                        return None
                    await self._cond.wait(wait)
                    continue
            try:
                response = await self._poster(call)
            except Exception as exc:
                error = as_poll_error(call, exc)
                async with self._cond:
                    if not self._scheduler.failed(call, error, self._clock()) or self._closed:
                        continue
                    self._error = error
                raise error from error.__cause__
            async with self._cond:
                changed = self._scheduler.completed(call, response, self._clock())
            if changed is not None:
                return changed

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    async def close(self) -> None:
        """Stop polling; wakes a waiting ``recv`` and aborts a poll in flight."""
        async with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        if self._on_close is not None:
            await self._on_close()

    def _check_open(self) -> None:
        if self._error is not None:
            raise TransportError(f"polling stream failed: {self._error}") from self._error
        if self._closed:
            raise TransportError("polling stream is closed")
