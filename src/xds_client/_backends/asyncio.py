"""The asyncio backend: events, conditions, an inbox, workers and callbacks on one loop.

Every object here belongs to the running loop that created it (or first used it);
the thread twins in :mod:`xds_client._backends.threads` offer the same names without
the ``Async`` prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio
from typing_extensions import Self

from xds_client._backends.threads import Closing
from xds_client.errors import UsageError

__all__ = [
    "EMPTY",
    "Empty",
    "AsyncCondition",
    "AsyncDispatcher",
    "AsyncEvent",
    "AsyncInbox",
    "AsyncWaiter",
    "AsyncWorker",
    "sleep",
    "TimerHandle",
    "call_later",
    "CALL_FAILURES",
    "CallCancelledError",
    "finish_call",
    "open_channel",
    "read_message",
    "start_call",
    "task_cancelling",
    "unary_call",
    "running_loop",
    "spawn",
]


T = TypeVar("T")
log = logging.getLogger("xds_client.client")


def running_loop(what: str) -> asyncio.AbstractEventLoop:
    """The running loop; :class:`~xds_client.errors.UsageError` naming ``what`` without one."""

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise UsageError(f"{what} needs a running event loop") from None


class AsyncEvent:
    """A flag to wait on: ``set()``, ``clear()``, ``await wait(timeout) -> bool``."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout: float | None = None) -> bool:
        """True once set; False when ``timeout`` seconds pass first."""
        if self._event.is_set():
            return True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        return self._event.is_set()


class AsyncCondition:
    """A lock with ``wait(timeout)`` and ``notify_all()``; used with ``async with``."""

    __slots__ = ("_cond",)

    def __init__(self) -> None:
        self._cond = asyncio.Condition()

    async def __aenter__(self) -> None:
        await self._cond.acquire()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self._cond.release()

    async def wait(self, timeout: float | None) -> bool:
        """Release the lock until notified or ``timeout`` passes; True when notified."""
        try:
            await asyncio.wait_for(self._cond.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def notify_all(self) -> None:
        self._cond.notify_all()


class Empty:
    """Returned by :meth:`AsyncInbox.get` when nothing arrived in time."""


EMPTY = Empty()


class AsyncInbox(Generic[T]):
    """The driver's inbox: ``put`` never waits; ``await get(timeout)`` returns EMPTY on timeout.

    ``put`` must be called on the loop (readers and helpers are tasks on it). A deque
    and one bare future per waiting ``get`` (an ``asyncio.Queue`` runs about five
    Python calls per ``put`` and ``wait_for`` around each ``get``: this carries every
    request a stream sends, an ACK per response).
    """

    __slots__ = ("_items", "_waiters")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()

    def put(self, item: T) -> None:
        self._items.append(item)
        if self._waiters:
            self._wake_next()

    async def get(self, timeout: float | None) -> T | Empty:
        items = self._items
        if items:
            return items.popleft()
        if timeout is not None and timeout <= 0:
            return EMPTY
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        waiters = self._waiters
        while True:
            waiter = loop.create_future()
            waiters.append(waiter)
            timer = None if deadline is None else loop.call_at(deadline, self._expire, waiter)
            try:
                await waiter
            except BaseException:
                if timer is not None:
                    timer.cancel()
                if waiter in waiters:
                    waiters.remove(waiter)  # no put chose it
                elif items:
                    self._wake_next()  # a put chose it before the cancellation: pass it on
                raise
            if timer is not None:
                timer.cancel()
            if items:
                return items.popleft()
            if deadline is not None and loop.time() >= deadline:
                return EMPTY

    def _wake_next(self) -> None:
        """Wake the oldest waiting ``get`` (a put chooses it by taking it off the queue)."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # else cancelled, on its way out
                waiter.set_result(None)
                return

    def _expire(self, waiter: asyncio.Future[None]) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        if not waiter.done():
            waiter.set_result(None)

    def get_nowait(self) -> T | Empty:
        items = self._items
        return items.popleft() if items else EMPTY


class AsyncWorker:
    """A task running one coroutine function; :meth:`join` waits, then cancels."""

    __slots__ = ("task",)

    def __init__(self, task: asyncio.Task[None]) -> None:
        self.task = task

    def cancel(self) -> None:
        """Ask the worker to end (a task is cancelled; a thread only ends by itself)."""
        self.task.cancel()

    def done(self) -> bool:
        return self.task.done()

    async def join(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` seconds for the worker to end; cancel it after that."""
        if asyncio.current_task() is self.task:
            return
        if not self.task.done():
            await asyncio.wait({self.task}, timeout=timeout)
        if not self.task.done():
            self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task


class AsyncWaiter:
    """Wakes whoever waits for events of one watch buffer (woken on every put).

    One bare future per wait, resolved by :meth:`wake`: no task, no ``wait_for``
    and no ``asyncio.Event`` per event (on Python 3.11 ``wait_for`` wraps each
    wait in a new task). A wait with a timeout reuses the timer of an earlier wait
    when that one fires no later: ``watch.get(timeout=...)`` in a loop arms one
    timer per timeout, not one per event, and a timer that fires early only makes
    the caller look again and wait for what remains. Loop-bound: ``wake`` is called
    on the loop.
    """

    __slots__ = ("_future", "_set", "_timer", "_timer_at")
    wants_wake = True
    """The buffer must call :meth:`wake` on every put (threads wait on its condition)."""

    def __init__(self) -> None:
        self._set = False
        self._future: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def wake(self) -> None:
        self._set = True
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self, buffer: Any, timeout: float | None) -> None:
        """Wait until woken (an event is pending or the buffer closed), ``timeout``
        passes, or (rarely) a little earlier: callers look again and wait on."""
        if self._set:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._future = future
        if timeout is not None:
            at = loop.time() + timeout
            timer = self._timer
            if timer is None or self._timer_at > at:
                if timer is not None:
                    timer.cancel()
                self._timer = loop.call_at(at, self._expire)
                self._timer_at = at
        try:
            await future
        finally:
            self._future = None

    def _expire(self) -> None:
        self._timer = None
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)


def spawn(target: Callable[..., Coroutine[Any, Any, None]], *args: Any, name: str) -> AsyncWorker:
    """Run ``target(*args)`` as a task on the running loop."""
    return AsyncWorker(asyncio.get_running_loop().create_task(target(*args), name=name))


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


TimerHandle = asyncio.TimerHandle
"""What :func:`call_later` returns: ``cancel()`` stops it."""


def call_later(seconds: float, callback: Callable[[], object]) -> TimerHandle:
    """Call ``callback`` on the running loop after ``seconds`` (the thread twin: a timer thread)."""
    return asyncio.get_running_loop().call_later(seconds, callback)


async def run_blocking(work: Callable[[], object]) -> None:
    """Run blocking ``work`` (file I/O) off the loop; awaited, so calls stay in order."""
    await asyncio.to_thread(work)


def task_cancelling() -> bool:
    """Whether the current task is being cancelled (so a CancelledError must propagate).

    Python 3.10 cannot tell (``Task.cancelling`` is new in 3.11): assume it is, since
    swallowing a real cancellation would hang whoever cancelled the task.
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or bool(cancelling())


class CallCancelledError(grpc.RpcError):
    """A call of ours was cancelled locally (grpc.aio raises CancelledError for it)."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.CANCELLED

    def details(self) -> str:
        return "cancelled locally"

    def trailing_metadata(self) -> tuple[Any, ...]:
        return ()


def open_channel(
    uri: str, credentials: grpc.ChannelCredentials | None, options: Sequence[tuple[str, Any]]
) -> grpc.aio.Channel:
    """A channel to ``uri``, plaintext when ``credentials`` is None.

    Every client passes ``channel_arguments(target)`` (``transport/_channel.py``), so a
    target's TLS, keepalive and options apply the same way everywhere.
    """
    if credentials is None:
        return grpc.aio.insecure_channel(uri, options=options)
    return grpc.aio.secure_channel(uri, credentials, options=options)


CALL_FAILURES: tuple[type[BaseException], ...] = (grpc.RpcError,)
"""What a failed call raises (the thread twin adds the future's cancellation)."""


async def unary_call(
    method: Any, request: Any, *, timeout: float | None, metadata: Any
) -> tuple[Any, Any]:
    """One unary call: (response, trailing metadata); raises :class:`grpc.RpcError`."""
    call = method(request, timeout=timeout, metadata=metadata)
    response = await call
    return response, await call.trailing_metadata()


def start_call(method: Any, request: Any, *, timeout: float | None, metadata: Any) -> Any:
    """Start a unary call now and finish it later with :func:`finish_call` (read-ahead)."""
    return method(request, timeout=timeout, metadata=metadata)


async def finish_call(call: Any) -> tuple[Any, Any]:
    """(response, trailing metadata) of a call from :func:`start_call`."""
    response = await call
    return response, await call.trailing_metadata()


async def read_message(stream: Any) -> Any:
    """The next message of a server stream, None at its end.

    A local ``cancel()`` surfaces as :class:`CallCancelledError` (a ``grpc.RpcError``,
    as in the thread twin) unless the current task itself is being cancelled.
    """
    try:
        message = await stream.read()
    except asyncio.CancelledError:
        if stream.cancelled() and not task_cancelling():
            raise CallCancelledError from None
        raise
    return None if message is grpc.aio.EOF else message


class AsyncDispatcher:
    """Runs ``on_event`` callbacks on the loop; a coroutine result is awaited in a task.

    A raising callback is logged only. ``notify`` may come from any thread.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False

    def start(self, owner: str) -> None:
        """Bind to the running loop; :class:`UsageError` naming ``owner`` without one."""
        self._loop = running_loop(owner)

    def notify(self, buffer: Any, callback: Callable[[Any], object]) -> None:
        loop = self._loop
        if loop is None or self._stopped:
            return
        loop.call_soon_threadsafe(self._run, buffer, callback)

    def _run(self, buffer: Any, callback: Callable[[Any], object]) -> None:
        while (event := buffer.pop()) is not None:
            try:
                result = callback(event)
            except Exception:
                log.exception("on_event callback raised; the watch goes on")
                continue
            if inspect.isawaitable(result):
                assert self._loop is not None
                task = self._loop.create_task(_await_callback(result))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def stop(self, timeout: float) -> None:
        """Stop taking callbacks; cancel the awaited ones still running."""
        self._stopped = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)


async def _await_callback(result: Any) -> None:
    try:
        await result
    except Exception:
        log.exception("on_event callback raised; the watch goes on")


# The transports (transport/_async_grpc.py, _async_fetch.py, _async_rest.py; their
# thread twins are generated) use what follows.

DIRECT_READS = True
"""``recv(None)`` reads the call in the caller's task (one task and one queue less per
response); a reader task starts only for a ``recv`` with a timeout, since a read
cancelled by a timeout would cancel the whole call. Do not mix the two on one stream
while a direct read is waiting."""


async def read_response(call: Any) -> Any:
    """The next response of a bidi stream, None at its end.

    grpc.aio logs a response that does not deserialize and hands back None; that raises
    ValueError here, since the stream's state is unknown from then on (the thread twin's
    call raises for it, too). A local ``cancel()`` raises :class:`CallCancelledError`
    (a ``grpc.RpcError``) unless the current task itself is being cancelled.
    """
    try:
        message = await call.read()
    except asyncio.CancelledError:
        if call.cancelled() and not task_cancelling():
            raise CallCancelledError from None
        raise
    if message is grpc.aio.EOF:
        return None
    if message is None:
        raise ValueError("the server sent a response that does not decode")
    return message


CALL_CANCELLED: tuple[type[BaseException], ...] = (CallCancelledError,)
"""What :func:`call_result` raises for a call cancelled locally (``call.cancel()``)."""


async def call_result(call: Any) -> Any:
    """The response of a call from :func:`start_call`; raises :class:`grpc.RpcError`.

    A local ``cancel()`` raises :class:`CallCancelledError` unless the current task
    itself is being cancelled (then the cancellation goes on).
    """
    try:
        return await call
    except asyncio.CancelledError:
        if call.cancelled() and not task_cancelling():
            raise CallCancelledError from None
        raise


R = TypeVar("R")


async def call_blocking(work: Callable[..., R], *args: Any) -> R:
    """Run blocking ``work(*args)`` in a worker thread, off the loop."""
    return await asyncio.to_thread(work, *args)


class AsyncClosing(Closing):
    """A base for async objects closed by a plain ``close()``: ``with`` and ``async with``.

    The thread twin is :class:`~xds_client._backends.threads.Closing` (``with`` only).
    """

    __slots__ = ()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()
