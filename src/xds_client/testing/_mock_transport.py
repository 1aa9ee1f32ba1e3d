"""In-memory transports for testing the clients (and your code) without sockets.

Like httpx's ``MockTransport``: pass one as ``XdsClient(..., transport=MockTransport(h))``
(or :class:`AsyncMockTransport` to ``AsyncXdsClient``). ``handler(stream, request)`` is
called for every request the client sends and may return responses to deliver (one,
several, or None). Tests can also push responses or failures on a stream at any time,
from any thread, and read what the client sent::

    def handler(stream, request):
        if not request.response_nonce:          # the first request of a stream
            return cluster_response("1", Cluster(name="c"))

    transport = MockTransport(handler)
    with XdsClient("mock", node=Node(id="n"), transport=transport) as client:
        client.wait_for(Cluster, "c")
    assert transport.streams[0].requests[-1].version_info == "1"   # the ACK
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Union

from xds_client.errors import TransportError
from xds_client.transport._base import Request, Response, StreamSpec

__all__ = ["AsyncMockTransport", "MockHandler", "MockStream", "MockTransport"]

MockHandler = Callable[["MockStream", Request], Response | Iterable[Response] | None]
"""Answers one request: a response, several, or None."""

_Item = Union[Response, TransportError]  # noqa: UP007 - a runtime alias on Python 3.10


class MockStream:
    """One stream opened by the client: what it sent, and a script of what it receives.

    The same object serves :class:`MockTransport` and :class:`AsyncMockTransport`; its
    methods for tests (``push``, ``fail``, ``end``, ``requests``) are thread-safe.
    """

    def __init__(self, spec: StreamSpec, number: int, handler: MockHandler | None) -> None:
        self.spec = spec
        """What the client asked for: method, delta or not, type URLs."""
        self.number = number
        """Streams are numbered from 0 in the order the client opened them."""
        self.requests: list[Request] = []
        """Every request the client sent on this stream, in order."""
        self.closed = False
        """True once the client closed the stream."""
        self._handler = handler
        self._lock = threading.Lock()
        self._items: deque[_Item] = deque()
        self._cond = threading.Condition(self._lock)
        self._wakers: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.requests)} requests"
        return f"<MockStream {self.number} {self.spec.method.rsplit('/', 1)[-1]} {state}>"

    # ------------------------------------------------------------ for tests

    def push(self, *responses: Response) -> None:
        """Deliver responses to the client, in order."""
        self._put(*responses)

    def fail(self, message: str = "the mock server failed the stream") -> None:
        """Fail the stream: the client's next ``recv`` raises TransportError."""
        self._put(TransportError(f"{self.spec.method}: {message}"))

    def end(self) -> None:
        """End the stream as a server closing it cleanly would."""
        self.fail("server ended stream")

    # ------------------------------------------------------------ for the transports

    def _put(self, *items: _Item) -> None:
        with self._lock:
            self._items.extend(items)
            self._cond.notify_all()
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def _record(self, request: Request) -> None:
        if self.closed:
            raise TransportError(f"{self.spec.method}: stream is closed")
        with self._lock:
            self.requests.append(request)
        if self._handler is not None:
            answer = self._handler(self, request)
            if answer is None:
                return
            if isinstance(answer, Iterable):
                self._put(*answer)
            else:
                self._put(answer)

    def _take(self) -> _Item | None:
        # Caller holds the lock. A failure stays queued: the stream stays failed.
        if not self._items:
            return None
        item = self._items[0]
        if not isinstance(item, TransportError):
            self._items.popleft()
        return item

    def _close(self) -> None:
        self._put(TransportError(f"{self.spec.method}: stream closed locally"))
        self.closed = True

    def send(self, request: Request) -> None:
        self._record(request)

    def recv(self, timeout: float | None) -> Response | None:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._items), timeout)
            item = self._take()
        if isinstance(item, TransportError):
            raise item
        return item

    def close(self) -> None:
        self._close()


class _AsyncMockStream:
    """The asyncio face of a :class:`MockStream` (the client sees this one)."""

    def __init__(self, stream: MockStream) -> None:
        self.stream = stream
        self._loop = asyncio.get_running_loop()
        self._ready = asyncio.Event()
        stream._wakers.append(self._wake)

    def _wake(self) -> None:
        self._loop.call_soon_threadsafe(self._ready.set)

    async def send(self, request: Request) -> None:
        self.stream._record(request)

    async def recv(self, timeout: float | None) -> Response | None:
        stream = self.stream
        while True:
            self._ready.clear()
            with stream._lock:
                item = stream._take()
            if isinstance(item, TransportError):
                raise item
            if item is not None:
                return item
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except asyncio.TimeoutError:
                return None

    async def close(self) -> None:
        self.stream._close()


class _MockTransportBase:
    def __init__(self, handler: MockHandler | None = None, *, reachable: bool = True) -> None:
        self.handler = handler
        self.reachable = reachable
        """What :meth:`probe` answers (set it to False to play an unreachable server)."""
        self.streams: list[MockStream] = []
        """Every stream the client opened, in order."""
        self.closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {len(self.streams)} streams>"

    def _open(self, spec: StreamSpec) -> MockStream:
        if self.closed:
            raise TransportError("the mock transport is closed")
        stream = MockStream(spec, len(self.streams), self.handler)
        self.streams.append(stream)
        return stream

    def _close(self) -> None:
        self.closed = True
        for stream in self.streams:
            if not stream.closed:
                stream._close()


class MockTransport(_MockTransportBase):
    """An in-memory :class:`~xds_client.transport.Transport` for :class:`XdsClient`."""

    def open(self, spec: StreamSpec) -> MockStream:
        return self._open(spec)

    def probe(self, timeout: float) -> bool:
        return self.reachable

    def close(self) -> None:
        self._close()


class AsyncMockTransport(_MockTransportBase):
    """An in-memory :class:`~xds_client.transport.AsyncTransport` for AsyncXdsClient."""

    async def open(self, spec: StreamSpec) -> _AsyncMockStream:
        return _AsyncMockStream(self._open(spec))

    async def probe(self, timeout: float) -> bool:
        return self.reachable

    async def close(self) -> None:
        self._close()
