"""Fixtures that run one test body against XdsClient and AsyncXdsClient alike.

The async client runs on an event loop in a helper thread; a small proxy turns
its coroutines into blocking calls, so the same assertions drive both clients.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Literal, TypeVar

import pytest

from xds_client import (
    AsyncWatch,
    AsyncXdsClient,
    Backoff,
    ConnectivityChanged,
    Watch,
    WatchEvent,
    XdsClient,
)
from xds_client.errors import WaitTimeoutError
from xds_client.testing import ControlPlane

T = TypeVar("T")
Mode = Literal["sync", "async"]

FAST_BACKOFF = Backoff(initial=0.05, multiplier=1.6, jitter=0.2, maximum=0.3)
CALL_TIMEOUT = 15.0


class LoopThread:
    """An event loop on its own thread, for driving the async client from sync tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        async def wrapper() -> T:
            return fn()

        return self.run(wrapper())

    def close(self) -> None:
        async def drain() -> None:
            # grpc.aio finishes its own tasks a few loop turns after a cancel, once its
            # completion-queue thread has run: on a loaded machine that can take a while.
            current = asyncio.current_task()
            deadline = time.monotonic() + 5.0
            while True:
                pending = [t for t in asyncio.all_tasks() if t is not current]
                if not pending or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.01)
            assert not pending, f"tasks left running: {pending}"

        try:
            self.run(drain())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()


class WatchProxy:
    """The same blocking surface over a :class:`Watch` or an :class:`AsyncWatch`."""

    def __init__(self, watch: Watch[Any] | AsyncWatch[Any], loop: LoopThread | None) -> None:
        self.watch = watch
        self.loop = loop

    def get(self, timeout: float = 5.0) -> WatchEvent[Any]:
        if isinstance(self.watch, AsyncWatch):
            assert self.loop is not None
            return self.loop.run(self.watch.get(timeout), timeout + 5)
        return self.watch.get(timeout)

    def next(
        self,
        kind: type[Any],
        timeout: float = 5.0,
        where: Callable[[Any], bool] | None = None,
    ) -> Any:
        """The next event of class ``kind`` (meeting ``where``), skipping others."""
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while True:
            remaining = deadline - time.monotonic()
            try:
                event = self.get(max(0.0, remaining))
            except WaitTimeoutError:
                raise AssertionError(f"no {kind.__name__} within {timeout}s; saw {seen}") from None
            if isinstance(event, kind) and (where is None or where(event)):
                return event
            seen.append(type(event).__name__)

    @property
    def pending(self) -> int:
        return self.watch.pending

    def close(self) -> None:
        if self.loop is not None:
            self.loop.call(self.watch.close)
        else:
            self.watch.close()

    def __enter__(self) -> WatchProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ClientProxy:
    """Blocking calls to either client, so one test body covers both."""

    def __init__(self, mode: Mode, loop: LoopThread | None, *args: Any, **kwargs: Any) -> None:
        self.mode = mode
        self.loop = loop
        if mode == "sync":
            self.client: XdsClient | AsyncXdsClient = XdsClient(*args, **kwargs)
        else:
            assert loop is not None
            self.client = loop.call(lambda: AsyncXdsClient(*args, **kwargs))

    def watch(self, *args: Any, **kwargs: Any) -> WatchProxy:
        if isinstance(self.client, AsyncXdsClient):
            assert self.loop is not None
            client = self.client
            return WatchProxy(self.loop.call(lambda: client.watch(*args, **kwargs)), self.loop)
        return WatchProxy(self.client.watch(*args, **kwargs), None)

    def wait_for(self, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self.client, AsyncXdsClient):
            assert self.loop is not None
            return self.loop.run(self.client.wait_for(*args, **kwargs), CALL_TIMEOUT + 10)
        return self.client.wait_for(*args, **kwargs)

    def resources(self, resource: Any) -> Any:
        return self._call(lambda: self.client.resources(resource))

    def config_dump(self) -> Any:
        return self._call(self.client.config_dump)

    def current_server(self, resource: Any = None) -> str | None:
        return self._call(lambda: self.client.current_server(resource))

    def _call(self, fn: Callable[[], T]) -> T:
        return self.loop.call(fn) if self.loop is not None else fn()

    def close(self) -> None:
        if isinstance(self.client, AsyncXdsClient):
            assert self.loop is not None
            self.loop.run(self.client.aclose())
        else:
            self.client.close()


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> Mode:
    """Run the test once with XdsClient and once with AsyncXdsClient."""
    value: Mode = request.param
    return value


@pytest.fixture
def loop_thread(mode: Mode) -> Iterator[LoopThread | None]:
    if mode == "sync":
        yield None
        return
    loop = LoopThread()
    try:
        yield loop
    finally:
        loop.close()


@pytest.fixture
def cp() -> Iterator[ControlPlane]:
    with ControlPlane(rest_port=None, heartbeat_interval=None) as control_plane:
        yield control_plane


@pytest.fixture
def make_client(mode: Mode, loop_thread: LoopThread | None) -> Iterator[Callable[..., ClientProxy]]:
    """Build clients of the current mode with fast backoff; all are closed after the test."""
    made: list[ClientProxy] = []

    def make(*args: Any, **kwargs: Any) -> ClientProxy:
        kwargs.setdefault("backoff", FAST_BACKOFF)
        kwargs.setdefault("node", _node())
        proxy = ClientProxy(mode, loop_thread, *args, **kwargs)
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.close()


def _node() -> Any:
    from xds_client import Node

    return Node(id="test-node", cluster="test-cluster")


def skip_connectivity(event: WatchEvent[Any]) -> bool:
    return not isinstance(event, ConnectivityChanged)
