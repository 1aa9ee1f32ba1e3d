"""The thread Waiter (a token queue): no lost wake-up, and every blocked reader wakes."""

from __future__ import annotations

import threading
import time

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
