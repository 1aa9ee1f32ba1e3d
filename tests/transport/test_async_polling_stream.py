"""AsyncPollingStream on a scripted poster; ``tools/gen_sync.py`` makes the PollingStream twin."""

from __future__ import annotations

import time

import pytest
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse
from tenacity import wait_fixed

from tests._twin_support import run_async
from xds_client._backends.asyncio import AsyncInbox, spawn
from xds_client.errors import TransportError
from xds_client.transport._async_polling_stream import AsyncPollingStream
from xds_client.transport._polling import PollCall, PollError, PollPolicy

from .test_poll_scheduler import req, resp

pytestmark = pytest.mark.timeout(30)

FAST = PollPolicy(interval=0.05, jitter=0.0, backoff=wait_fixed(0.01), failures_before_error=2)


class AsyncScript:
    """A poster that answers from a list (a response, None, or an exception)."""

    def __init__(self, *answers: DiscoveryResponse | Exception | None) -> None:
        self.answers = list(answers)
        self.calls: list[PollCall] = []

    async def __call__(self, call: PollCall) -> DiscoveryResponse | None:
        self.calls.append(call)
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer
        return answer


@run_async  # async-only
async def test_stream_returns_changes_and_none_on_timeout() -> None:
    script = AsyncScript(resp("v1"), None, resp("v1"), resp("v2"))
    stream = AsyncPollingStream(script, FAST)
    await stream.send(req(node=True))
    first = await stream.recv(2.0)
    assert first is not None
    assert first.version_info == "v1"
    second = await stream.recv(2.0)
    assert second is not None
    assert second.version_info == "v2"
    assert len(script.calls) == 4
    start = time.monotonic()
    assert await stream.recv(0.12) is None  # later polls answer "unchanged"
    assert time.monotonic() - start < 1.0
    assert len(script.calls) >= 5
    await stream.close()
    with pytest.raises(TransportError, match="closed"):
        await stream.recv(0.1)
    with pytest.raises(TransportError, match="closed"):
        await stream.send(req())


@run_async  # async-only
async def test_stream_with_nothing_subscribed_times_out() -> None:
    stream = AsyncPollingStream(AsyncScript(), FAST)
    start = time.monotonic()
    assert await stream.recv(0.05) is None
    assert 0.04 <= time.monotonic() - start < 1.0
    await stream.close()


@run_async  # async-only
async def test_stream_retries_then_fails_and_stays_failed() -> None:
    cause = ConnectionRefusedError("refused")
    err = PollError("refused", retryable=True)
    err.__cause__ = cause
    script = AsyncScript(resp("v1"), err, resp("v2"), err, err)
    stream = AsyncPollingStream(script, FAST)
    await stream.send(req())
    got = await stream.recv(2.0)
    assert got is not None
    assert got.version_info == "v1"
    got = await stream.recv(2.0)
    assert got is not None  # one failure is retried
    assert got.version_info == "v2"
    with pytest.raises(TransportError, match="refused") as info:
        await stream.recv(2.0)
    assert info.value.__cause__ is cause
    with pytest.raises(TransportError, match="failed"):
        await stream.recv(0.1)
    await stream.close()


@run_async  # async-only
async def test_send_wakes_recv_and_close_unblocks() -> None:
    stream = AsyncPollingStream(AsyncScript(resp("v1")), FAST.with_interval(60))
    results: AsyncInbox[object] = AsyncInbox()

    async def receive() -> None:
        try:
            results.put(await stream.recv(10.0))
            results.put(await stream.recv(10.0))
        except TransportError as exc:
            results.put(exc)

    worker = spawn(receive, name="receive")
    await stream.send(req())  # recv waits with nothing subscribed until this wakes it
    assert isinstance(await results.get(5), DiscoveryResponse)
    await stream.close()  # the second recv waits for a poll 60 s away: close must wake it
    assert isinstance(await results.get(5), TransportError)
    await worker.join(5)
    assert worker.done()


@run_async  # async-only
async def test_on_close_runs_once() -> None:
    calls: list[int] = []

    async def on_close() -> None:
        calls.append(1)

    stream = AsyncPollingStream(AsyncScript(), FAST, on_close=on_close)
    await stream.close()
    await stream.close()
    assert calls == [1]


@run_async  # async-only
async def test_unexpected_poster_errors_fail_the_stream_typed() -> None:
    bug = KeyError("oops")
    stream = AsyncPollingStream(AsyncScript(bug), FAST)
    await stream.send(req())
    with pytest.raises(TransportError, match="oops") as info:
        await stream.recv(2.0)
    assert info.value.__cause__ is bug
    await stream.close()
