"""Waiting on a condition in tests: poll with a deadline, never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout: float = 10.0, what: str = "") -> T:
    """Poll ``check`` until it returns something true and return that; fail the test
    with ``what`` (or the check itself) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(0.005)  # the state is a plain value another thread changes: poll it
