"""The thread Waiter (a token queue): no lost wake-up, and every blocked reader wakes."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from tests._waiting import wait_until
from xds_client import ResourceRemoved
from xds_client._backends.threads import Waiter
from xds_client.client._watchers import EventBuffer

pytestmark = pytest.mark.timeout(30)


def _get(buffer: EventBuffer, waiter: Waiter, timeout: float) -> object:
    """Watch.get's loop."""
    deadline = time.monotonic() + timeout
    while True:
        waiter.clear()
        event = buffer.pop()
        if event is not None:
            return event
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        waiter.wait(buffer, remaining)


def test_two_readers_of_one_watch_both_wake() -> None:
    buffer, waiter = EventBuffer(100), Waiter()
    buffer.set_wake(waiter.wake)
    got: list[object] = []
    readers = [threading.Thread(target=lambda: got.append(_get(buffer, waiter, 5))) for _ in "ab"]
    for reader in readers:
        reader.start()
    wait_until(lambda: waiter._waiting >= 2, 5, "both readers blocked")
    start = time.monotonic()
    buffer.put_many([ResourceRemoved("t", "a", "deleted"), ResourceRemoved("t", "b", "deleted")])
    for reader in readers:
        reader.join(5)
    assert len(got) == 2
    assert None not in got
    assert time.monotonic() - start < 1.0


def test_many_puts_from_another_thread_are_all_seen() -> None:
    buffer, waiter = EventBuffer(100_000), Waiter()
    buffer.set_wake(waiter.wake)
    n = 5_000

    def produce() -> None:
        for i in range(n):
            buffer.put(ResourceRemoved("t", str(i), "deleted"))

    producer = threading.Thread(target=produce)
    producer.start()
    names = [getattr(_get(buffer, waiter, 5), "name", None) for _ in range(n)]
    producer.join(5)
    assert names == [str(i) for i in range(n)]


def _removed(name: str) -> ResourceRemoved:
    return ResourceRemoved("type.googleapis.com/envoy.config.cluster.v3.Cluster", name, "deleted")


async def _aget(buffer: EventBuffer, waiter: Any, timeout: float) -> object:
    """AsyncWatch.get's loop."""
    deadline = time.monotonic() + timeout
    while True:
        waiter.clear()
        event = buffer.pop()
        if event is not None:
            return event
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        await waiter.wait(buffer, remaining)


def test_async_waits_with_a_timeout_share_one_timer() -> None:
    """get(timeout=...) per event must not arm (and cancel) a loop timer per event."""
    from xds_client._backends.asyncio import AsyncWaiter

    async def main() -> tuple[int, list[object]]:
        loop = asyncio.get_running_loop()
        buffer, waiter = EventBuffer(100), AsyncWaiter()
        buffer.set_wake(waiter.wake)
        armed = 0
        call_at = loop.call_at

        def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal armed
            armed += 1
            return call_at(when, callback, *args, **kwargs)

        loop.call_at = counting  # type: ignore[method-assign,assignment]
        got = []
        for i in range(50):
            loop.call_soon(buffer.put, _removed(str(i)))
            got.append(await _aget(buffer, waiter, 60.0))
        loop.call_at = call_at  # type: ignore[method-assign]
        return armed, got

    armed, got = asyncio.run(main())
    assert [e.name for e in got] == [str(i) for i in range(50)]  # type: ignore[attr-defined]
    assert armed <= 1


def test_async_wait_times_out_and_an_early_timer_only_rewaits() -> None:
    from xds_client._backends.asyncio import AsyncWaiter

    async def main() -> list[tuple[object, float]]:
        loop = asyncio.get_running_loop()
        buffer, waiter = EventBuffer(100), AsyncWaiter()
        buffer.set_wake(waiter.wake)
        out = []
        for timeout, put_at in ((0.2, None), (0.4, 0.05), (5.0, 0.6)):
            # The second wait leaves its timer (+0.4 s) armed; the third reuses it,
            # wakes early at +0.4 s, finds nothing and waits on for its event.
            if put_at is not None:
                loop.call_later(put_at, buffer.put, _removed(str(put_at)))
            start = time.monotonic()
            out.append((await _aget(buffer, waiter, timeout), time.monotonic() - start))
        return out

    (none, waited), (early, early_took), (late, late_took) = asyncio.run(main())
    assert none is None
    assert 0.15 <= waited < 2.0
    assert early is not None
    assert early_took < 0.35
    assert late is not None
    assert late.name == "0.6"  # type: ignore[attr-defined]
    assert 0.5 <= late_took < 4.0
