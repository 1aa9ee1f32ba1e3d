"""Helpers shared by the ResourceStore tests."""

from __future__ import annotations

from collections.abc import Callable

from tests._waiting import wait_until
from xds_client.store import ResourceKey, RetryPolicy

PREFIX = ResourceKey("dashboard.grafana.app", "dashboards", "default")

# Fast retries: the tests inject failures on purpose.
FAST = RetryPolicy(initial_backoff=0.005, max_backoff=0.05, jitter=0.1, deadline=20.0)


def key(name: str) -> ResourceKey:
    return PREFIX.with_name(name)


def doc(title: str = "", **labels: str) -> dict[str, object]:
    meta: dict[str, object] = {"labels": dict(labels)} if labels else {}
    return {"metadata": meta, "spec": {"title": title}}


def until(
    predicate: Callable[[], bool], what: str = "", timeout: float = 10.0
) -> Callable[[], bool]:
    """:func:`wait_until` as a function of nothing, for ``run_blocking`` in the twin tests."""
    return lambda: wait_until(predicate, timeout, what)
