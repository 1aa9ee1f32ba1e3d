"""Helpers shared by the ResourceStore tests."""

from __future__ import annotations

import time
from collections.abc import Callable

from xds_client.store import ResourceKey, RetryPolicy

PREFIX = ResourceKey("dashboard.grafana.app", "dashboards", "default")

# Fast retries: the tests inject failures on purpose.
FAST = RetryPolicy(initial_backoff=0.005, max_backoff=0.05, jitter=0.1, deadline=20.0)


def key(name: str) -> ResourceKey:
    return PREFIX.with_name(name)


def doc(title: str = "", **labels: str) -> dict[str, object]:
    meta: dict[str, object] = {"labels": dict(labels)} if labels else {}
    return {"metadata": meta, "spec": {"title": title}}


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Poll ``predicate`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.002)


def until(
    predicate: Callable[[], bool], what: str = "", timeout: float = 10.0
) -> Callable[[], None]:
    """:func:`wait_until` as a function of nothing, for ``run_blocking`` in the twin tests."""
    return lambda: wait_until(predicate, timeout, what)
