"""The asyncio inbox (the driver's queue, and each gRPC stream's request queue): FIFO,
timeouts, and no wake-up lost when a waiting ``get`` is cancelled."""

from __future__ import annotations

import asyncio
import time

import pytest

from xds_client._backends.asyncio import EMPTY, AsyncInbox


async def _cancelled(task: asyncio.Task[object]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_fifo_and_timeouts() -> None:
    async def main() -> None:
        inbox: AsyncInbox[int] = AsyncInbox()
        assert inbox.get_nowait() is EMPTY
        for i in range(100):
            inbox.put(i)
        assert [await inbox.get(None) for _ in range(99)] == list(range(99))
        assert await inbox.get(0) == 99
        assert await inbox.get(0) is EMPTY
        start = time.monotonic()
        assert await inbox.get(0.05) is EMPTY
        assert time.monotonic() - start >= 0.045
        assert not inbox._waiters  # a timed-out get leaves nothing behind
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(inbox.get(None), 0.01)
        assert not inbox._waiters

    asyncio.run(main())


def test_a_put_wakes_the_oldest_waiting_get() -> None:
    async def main() -> None:
        inbox: AsyncInbox[str] = AsyncInbox()
        first = asyncio.ensure_future(inbox.get(5))
        second = asyncio.ensure_future(inbox.get(5))
        await asyncio.sleep(0)
        inbox.put("a")
        inbox.put("b")
        assert await first == "a"
        assert await second == "b"

    asyncio.run(main())


def test_a_cancelled_get_passes_its_wake_up_on() -> None:
    async def main() -> None:
        inbox: AsyncInbox[str] = AsyncInbox()
        chosen = asyncio.ensure_future(inbox.get(None))
        other = asyncio.ensure_future(inbox.get(None))
        await asyncio.sleep(0)
        inbox.put("x")  # chooses the first waiter, which is then cancelled
        await _cancelled(chosen)
        assert await asyncio.wait_for(other, 1) == "x"
        waiting = asyncio.ensure_future(inbox.get(None))
        await asyncio.sleep(0)
        await _cancelled(waiting)  # cancelled while waiting: no waiter left behind
        assert not inbox._waiters
        inbox.put("y")
        assert await inbox.get(None) == "y"

    asyncio.run(main())
