# Generated from tests/transport/test_async_polling_stream.py by tools/gen_sync.py: do not edit.
"""PollingStream on a scripted poster (generated from test_async_polling_stream.py)."""

from __future__ import annotations

import time

import pytest
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse
from tenacity import wait_fixed

from xds_client._backends.threads import Inbox, spawn
from xds_client.errors import TransportError
from xds_client.transport._polling import PollCall, PollError, PollPolicy
from xds_client.transport._polling_stream import PollingStream

from .test_poll_scheduler import req, resp

pytestmark = pytest.mark.timeout(30)

FAST = PollPolicy(interval=0.05, jitter=0.0, backoff=wait_fixed(0.01), failures_before_error=2)


class Script:
    """A poster that answers from a list (a response, None, or an exception)."""

    def __init__(self, *answers: DiscoveryResponse | Exception | None) -> None:
        self.answers = list(answers)
        self.calls: list[PollCall] = []

    def __call__(self, call: PollCall) -> DiscoveryResponse | None:
        self.calls.append(call)
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_stream_returns_changes_and_none_on_timeout() -> None:
    script = Script(resp("v1"), None, resp("v1"), resp("v2"))
    stream = PollingStream(script, FAST)
    stream.send(req(node=True))
    first = stream.recv(2.0)
    assert first is not None
    assert first.version_info == "v1"
    second = stream.recv(2.0)
    assert second is not None
    assert second.version_info == "v2"
    assert len(script.calls) == 4
    start = time.monotonic()
    assert stream.recv(0.12) is None  # later polls answer "unchanged"
    assert time.monotonic() - start < 1.0
    assert len(script.calls) >= 5
    stream.close()
    with pytest.raises(TransportError, match="closed"):
        stream.recv(0.1)
    with pytest.raises(TransportError, match="closed"):
        stream.send(req())


def test_stream_with_nothing_subscribed_times_out() -> None:
    stream = PollingStream(Script(), FAST)
    start = time.monotonic()
    assert stream.recv(0.05) is None
    assert 0.04 <= time.monotonic() - start < 1.0
    stream.close()


def test_stream_retries_then_fails_and_stays_failed() -> None:
    cause = ConnectionRefusedError("refused")
    err = PollError("refused", retryable=True)
    err.__cause__ = cause
    script = Script(resp("v1"), err, resp("v2"), err, err)
    stream = PollingStream(script, FAST)
    stream.send(req())
    got = stream.recv(2.0)
    assert got is not None
    assert got.version_info == "v1"
    got = stream.recv(2.0)
    assert got is not None  # one failure is retried
    assert got.version_info == "v2"
    with pytest.raises(TransportError, match="refused") as info:
        stream.recv(2.0)
    assert info.value.__cause__ is cause
    with pytest.raises(TransportError, match="failed"):
        stream.recv(0.1)
    stream.close()


def test_send_wakes_recv_and_close_unblocks() -> None:
    stream = PollingStream(Script(resp("v1")), FAST.with_interval(60))
    results: Inbox[object] = Inbox()

    def receive() -> None:
        try:
            results.put(stream.recv(10.0))
            results.put(stream.recv(10.0))
        except TransportError as exc:
            results.put(exc)

    worker = spawn(receive, name="receive")
    stream.send(req())  # recv waits with nothing subscribed until this wakes it
    assert isinstance(results.get(5), DiscoveryResponse)
    stream.close()  # the second recv waits for a poll 60 s away: close must wake it
    assert isinstance(results.get(5), TransportError)
    worker.join(5)
    assert worker.done()


def test_on_close_runs_once() -> None:
    calls: list[int] = []

    def on_close() -> None:
        calls.append(1)

    stream = PollingStream(Script(), FAST, on_close=on_close)
    stream.close()
    stream.close()
    assert calls == [1]


def test_unexpected_poster_errors_fail_the_stream_typed() -> None:
    bug = KeyError("oops")
    stream = PollingStream(Script(bug), FAST)
    stream.send(req())
    with pytest.raises(TransportError, match="oops") as info:
        stream.recv(2.0)
    assert info.value.__cause__ is bug
    stream.close()
