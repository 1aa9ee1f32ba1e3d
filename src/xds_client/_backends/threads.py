"""The thread backend: the twins of :mod:`xds_client._backends.asyncio` without asyncio.

Nothing here imports asyncio, so the generated sync drivers work inside a running
event loop (a notebook cell) and do not pay for loading it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar

import grpc

try:  # the C queue itself: the ``queue`` module around it is not needed (0.4 ms of import)
    from _queue import Empty as QueueEmpty
    from _queue import SimpleQueue
except ImportError:  # pragma: no cover - another interpreter
    from queue import Empty as QueueEmpty
    from queue import SimpleQueue
from typing_extensions import Self

__all__ = [
    "EMPTY",
    "Empty",
    "Condition",
    "Dispatcher",
    "Event",
    "Inbox",
    "Waiter",
    "Worker",
    "CALL_FAILURES",
    "finish_call",
    "open_channel",
    "read_message",
    "start_call",
    "unary_call",
    "sleep",
    "spawn",
    "TimerHandle",
    "call_later",
]


T = TypeVar("T")
log = logging.getLogger("xds_client.client")


class Event:
    """A flag to wait on: ``set()``, ``clear()``, ``wait(timeout) -> bool``."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once set; False when ``timeout`` seconds pass first."""
        return self._event.wait(timeout)


class Condition:
    """A lock with ``wait(timeout)`` and ``notify_all()``; used with ``with``."""

    __slots__ = ("_cond",)

    def __init__(self) -> None:
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        self._cond.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self._cond.release()

    def wait(self, timeout: float | None) -> bool:
        """Release the lock until notified or ``timeout`` passes; True when notified."""
        return self._cond.wait(timeout)

    def notify_all(self) -> None:
        self._cond.notify_all()


class Empty:
    """Returned by :meth:`Inbox.get` when nothing arrived in time."""


EMPTY = Empty()


class Inbox(Generic[T]):
    """The driver's inbox: ``put`` never waits (any thread); ``get(timeout)`` returns EMPTY."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: SimpleQueue[T] = SimpleQueue()

    def put(self, item: T) -> None:
        self._queue.put(item)

    def get(self, timeout: float | None) -> T | Empty:
        try:
            return self._queue.get(timeout=timeout)
        except QueueEmpty:
            return EMPTY

    def get_nowait(self) -> T | Empty:
        try:
            return self._queue.get_nowait()
        except QueueEmpty:
            return EMPTY


class Worker:
    """A daemon thread running one function; :meth:`join` waits up to a timeout."""

    __slots__ = ("thread",)

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread

    def cancel(self) -> None:
        """Threads cannot be cancelled: the function ends when what it waits on closes."""

    def done(self) -> bool:
        return not self.thread.is_alive()

    def join(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` seconds for the thread to end."""
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)


class Waiter:
    """Wakes whoever waits for events of one watch buffer: one token in a C queue per wake.

    ``SimpleQueue.get`` blocks in C; the buffer's Python-level condition would build
    a lock and run ``wait_for``'s predicate per event. A flag keeps at most one
    token queued (a stale one costs one spurious wake-up, never a missed one: the
    waiter clears the flag before it looks at the buffer).
    """

    __slots__ = ("_queue", "_set", "_waiting")
    wants_wake = True
    """The buffer must call :meth:`wake` on every put."""

    def __init__(self) -> None:
        self._queue: SimpleQueue[None] = SimpleQueue()
        self._set = False
        self._waiting = 0
        """Threads blocked in :meth:`wait` (several may read one watch): one token each."""

    def wake(self) -> None:
        if not self._set:
            self._set = True
            for _ in range(self._waiting or 1):
                self._queue.put(None)

    def clear(self) -> None:
        self._set = False

    def wait(self, buffer: Any, timeout: float | None) -> None:
        """Block until woken (an event is pending, the buffer closed) or ``timeout`` passes."""
        self._waiting += 1
        try:
            with contextlib.suppress(QueueEmpty):
                self._queue.get(timeout=timeout)
        finally:
            self._waiting -= 1


def spawn(target: Callable[..., None], *args: Any, name: str) -> Worker:
    """Run ``target(*args)`` on a new daemon thread."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return Worker(thread)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


TimerHandle = threading.Timer
"""What :func:`call_later` returns: ``cancel()`` stops it."""


def call_later(seconds: float, callback: Callable[[], object]) -> TimerHandle:
    """Call ``callback`` on a daemon timer thread after ``seconds``."""
    timer = threading.Timer(seconds, callback)
    timer.daemon = True
    timer.start()
    return timer


def run_blocking(work: Callable[[], object]) -> None:
    """Run blocking ``work`` (file I/O) here: the calling thread is already not a loop."""
    work()


def open_channel(
    uri: str, credentials: grpc.ChannelCredentials | None, options: Sequence[tuple[str, Any]]
) -> grpc.Channel:
    """A channel to ``uri``, plaintext when ``credentials`` is None.

    Every client passes ``channel_arguments(target)`` (``transport/_channel.py``), so a
    target's TLS, keepalive and options apply the same way everywhere.
    """
    if credentials is None:
        return grpc.insecure_channel(uri, options=options)
    return grpc.secure_channel(uri, credentials, options=options)


CALL_FAILURES: tuple[type[BaseException], ...] = (grpc.RpcError, grpc.FutureCancelledError)
"""What a failed call or a cancelled read-ahead raises."""


def unary_call(
    method: Any, request: Any, *, timeout: float | None, metadata: Any
) -> tuple[Any, Any]:
    """One unary call: (response, trailing metadata); raises :class:`grpc.RpcError`."""
    response, call = method.with_call(request, timeout=timeout, metadata=metadata)
    return response, call.trailing_metadata()


def start_call(method: Any, request: Any, *, timeout: float | None, metadata: Any) -> Any:
    """Start a unary call now and finish it later with :func:`finish_call` (read-ahead)."""
    return method.future(request, timeout=timeout, metadata=metadata)


def finish_call(call: Any) -> tuple[Any, Any]:
    """(response, trailing metadata) of a call from :func:`start_call`."""
    return call.result(), call.trailing_metadata()


def read_message(stream: Any) -> Any:
    """The next message of a server stream, None at its end (a local cancel raises RpcError)."""
    return next(stream, None)


class Dispatcher:
    """Runs ``on_event`` callbacks on one thread; a raising callback is logged only."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ready: deque[tuple[Any, Callable[[Any], object]]] = deque()
        self._queued: set[int] = set()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self, owner: str) -> None:
        """Start the dispatch thread (the asyncio twin binds to the running loop)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="xds-client-dispatch", daemon=True
            )
            self._thread.start()

    def notify(self, buffer: Any, callback: Callable[[Any], object]) -> None:
        with self._cond:
            if id(buffer) not in self._queued:
                self._queued.add(id(buffer))
                self._ready.append((buffer, callback))
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._ready) or self._stopped)
                if self._stopped:
                    return
                buffer, callback = self._ready.popleft()
                self._queued.discard(id(buffer))
            while (event := buffer.pop()) is not None:
                try:
                    callback(event)
                except Exception:
                    log.exception("on_event callback raised; the watch goes on")

    def stop(self, timeout: float) -> None:
        """Stop the dispatch thread, waiting up to ``timeout`` for a running callback."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and threading.current_thread() is not thread:
            thread.join(timeout)


# The transports (transport/_grpc.py, _fetch.py, _rest.py are generated from their
# asyncio modules and use what follows).

DIRECT_READS = True
"""A blocking ``recv(None)`` may read the call in the caller's own thread (one thread hop
less per response); a reader thread starts only for a ``recv`` with a timeout."""


def read_response(call: Any) -> Any:
    """The next response of a bidi stream, None at its end; raises what the call raises."""
    return next(call, None)


CALL_CANCELLED: tuple[type[BaseException], ...] = (grpc.FutureCancelledError,)
"""What :func:`call_result` raises for a call cancelled locally (``call.cancel()``)."""


def call_result(call: Any) -> Any:
    """The response of a call from :func:`start_call`; raises :class:`grpc.RpcError`."""
    return call.result()


R = TypeVar("R")


def call_blocking(work: Callable[..., R], *args: Any) -> R:
    """Run blocking ``work(*args)`` here (the asyncio twin runs it in a worker thread)."""
    return work(*args)


class Closing:
    """A base for objects closed by ``close()``: ``with`` closes them."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()
