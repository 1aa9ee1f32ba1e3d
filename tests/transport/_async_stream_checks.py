"""Checks shared by the transport tests; ``tools/gen_sync.py`` makes the thread twin."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from xds_client._backends.asyncio import AsyncInbox, AsyncWorker, call_blocking, spawn
from xds_client.errors import TransportError
from xds_client.transport import AsyncStream


def recv_in_background(
    stream: AsyncStream, timeout: float
) -> tuple[AsyncWorker, AsyncInbox[object]]:
    """Run ``stream.recv(timeout)`` in a worker; its answer or TransportError goes to the inbox."""
    results: AsyncInbox[object] = AsyncInbox()

    async def receive() -> None:
        try:
            results.put(await stream.recv(timeout))
        except TransportError as exc:
            results.put(exc)

    return spawn(receive, name="receive"), results


async def close_while_receiving(
    stream: AsyncStream, close: Callable[[], Awaitable[None]], started: Callable[[], object]
) -> float:
    """Call ``close`` while ``stream.recv(10)`` waits (once ``started()`` returns).

    Checks that the recv failed as closed; returns the seconds from ``close`` to that.
    """
    worker, results = recv_in_background(stream, 10)
    await call_blocking(started)
    start = time.monotonic()
    await close()
    outcome = await results.get(5)
    await worker.join(5)
    assert isinstance(outcome, TransportError), outcome
    assert "closed" in str(outcome)
    return time.monotonic() - start
