# Generated from tests/transport/_async_stream_checks.py by tools/gen_sync.py: do not edit.
"""Checks shared by the thread transport tests (generated from _async_stream_checks.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from xds_client._backends.threads import Inbox, Worker, call_blocking, spawn
from xds_client.errors import TransportError
from xds_client.transport import Stream


def recv_in_background(stream: Stream, timeout: float) -> tuple[Worker, Inbox[object]]:
    """Run ``stream.recv(timeout)`` in a worker; its answer or TransportError goes to the inbox."""
    results: Inbox[object] = Inbox()

    def receive() -> None:
        try:
            results.put(stream.recv(timeout))
        except TransportError as exc:
            results.put(exc)

    return spawn(receive, name="receive"), results


def close_while_receiving(
    stream: Stream, close: Callable[[], None], started: Callable[[], object]
) -> float:
    """Call ``close`` while ``stream.recv(10)`` waits (once ``started()`` returns).

    Checks that the recv failed as closed; returns the seconds from ``close`` to that.
    """
    worker, results = recv_in_background(stream, 10)
    call_blocking(started)
    start = time.monotonic()
    close()
    outcome = results.get(5)
    worker.join(5)
    assert isinstance(outcome, TransportError), outcome
    assert "closed" in str(outcome)
    return time.monotonic() - start
