"""Simulated xDS clients driven by Locust: ``pip install 'xds-client[locust]'``.

Subclass :class:`XdsUser` in a locustfile; each Locust user starts a batch of
``clients_per_user`` simulated clients and reports what they see as Locust request
events (request type ``xDS``): ``first config`` once per client, one event per
push-to-ACK named by the resource type (``CDS``, ``EDS`` ...), a failure for each
NACK (named by the type) and each stream error (``stream error``). Locust's
master/worker distribution, web UI and CSV files work unchanged::

    from xds_client.load.locust import XdsUser

    class Proxies(XdsUser):
        clients_per_user = 50
        profile = "envoy"

    # locust -f locustfile.py --host 127.0.0.1:18000

How it lives inside gevent (measured, see docs/load.md): Locust monkey-patches the
process, and grpc.aio does not run on gevent. So each Locust process gets one real
OS thread running one asyncio loop, shared by every user of that process. It is
created once, at Locust's ``init`` event, before anything can yield; while that
thread makes its loop (on the original epoll selector) and calls
``grpc.aio.init_grpc_aio()``, the modules gevent patched hold their original names
again, or grpc.aio's poller becomes a greenlet and every call hangs without an
error. Events come back through the gevent hub's ``run_callback_threadsafe`` into a
gevent queue, read by one greenlet that fires them; nothing on the gevent side ever
blocks on the loop thread.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

if sys.version_info < (3, 11):  # pragma: no cover - Locust itself needs 3.11
    raise ImportError("xds_client.load.locust needs Python 3.11+ (Locust does)")

import threading

import gevent
import gevent.monkey
import gevent.queue
import grpc.aio
from locust import User, constant, events, task
from locust.env import Environment
from locust.runners import MasterRunner

from xds_client.errors import UsageError

from ._fleet import Fleet, FleetOptions, check_fd_limit
from ._metrics import LoadEvent
from ._sample import SAMPLE_LISTENER

__all__ = ["LoopThread", "XdsUser", "fleet_of", "listen", "loop_thread"]

_START_TIMEOUT = 20.0


@contextmanager
def original_modules() -> Iterator[None]:
    """Put back, for the duration, every name gevent's monkey-patching replaced.

    Only for the moment the loop thread starts its loop and grpc.aio: the gevent
    side is blocked on a real lock meanwhile, so nothing else runs.
    """
    swapped: list[tuple[Any, str, Any]] = []
    for module_name, names in gevent.monkey.saved.items():
        module = sys.modules.get(module_name)
        if module is None or module_name.startswith("_gevent"):
            continue
        for name, original in names.items():
            if hasattr(module, name):
                swapped.append((module, name, getattr(module, name)))
            setattr(module, name, original)
    try:
        yield
    finally:
        for module, name, patched in reversed(swapped):
            setattr(module, name, patched)


class LoopThread:
    """One real OS thread running one asyncio loop with grpc.aio (one per process)."""

    def __init__(self) -> None:
        start_new_thread = gevent.monkey.get_original("_thread", "start_new_thread")
        allocate_lock = gevent.monkey.get_original("_thread", "allocate_lock")
        self.hub = gevent.get_hub()  # the gevent side's hub (this thread's)
        self.events: gevent.queue.Queue[Callable[[], None]] = gevent.queue.Queue()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread_id = 0
        self.error: BaseException | None = None
        self._stopped = allocate_lock()
        self._stopped.acquire()
        ready = allocate_lock()
        ready.acquire()
        with original_modules():
            start_new_thread(self._main, (ready,))
            # A real lock: the hub does not run until the loop is up.
            started = ready.acquire(True, _START_TIMEOUT)
        if not started:
            raise RuntimeError(
                f"grpc.aio did not start on its own thread within {_START_TIMEOUT:g} s inside "
                "gevent: an upgrade of gevent or grpcio broke xds_client.load.locust's "
                "workaround (see docs/load.md)"
            )
        if self.error is not None:
            raise RuntimeError(f"the asyncio thread for grpc.aio failed to start: {self.error}")
        self._pump = gevent.spawn(self._fire_events)

    def _main(self, ready: Any) -> None:

        try:
            epoll_selector = gevent.monkey.get_original("selectors", "EpollSelector")
            loop = asyncio.SelectorEventLoop(epoll_selector())
            asyncio.set_event_loop(loop)
            grpc.aio.init_grpc_aio()
            self.loop = loop
            self.thread_id = threading.get_native_id()
        except BaseException as exc:  # reported by __init__ on the gevent side
            self.error = exc
            ready.release()
            return
        ready.release()
        try:
            loop.run_forever()
        finally:
            loop.close()
            self._stopped.release()

    def call(self, function: Callable[..., Any], *args: Any) -> None:
        """Run ``function(*args)`` on the loop thread, soon; never waits."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(function, *args)

    def to_gevent(self, function: Callable[[], None]) -> None:
        """From the loop thread: run ``function`` in a greenlet of the gevent side."""
        self.hub.loop.run_callback_threadsafe(self.events.put_nowait, function)

    def _fire_events(self) -> None:
        while True:
            self.events.get()()

    def stop(self, fleets: list[Fleet], timeout: float = 10.0) -> None:
        """Stop the fleets, then the loop; waits (in a gevent-friendly way) for the thread."""
        loop = self.loop
        if loop is None:
            return

        async def shut() -> None:
            await asyncio.gather(*(f.stop() for f in fleets), return_exceptions=True)
            loop.stop()

        loop.call_soon_threadsafe(lambda: loop.create_task(shut()))
        deadline = timeout / 0.05
        while not self._stopped.acquire(False) and deadline > 0:
            gevent.sleep(0.05)
            deadline -= 1
        self._pump.kill(block=False)
        self.loop = None


_thread: LoopThread | None = None
_fleets: dict[type[XdsUser], Fleet] = {}


def loop_thread() -> LoopThread:
    """This process's loop thread (made at Locust's ``init`` event)."""
    global _thread  # noqa: PLW0603 - one per process, by design
    if _thread is None:
        _thread = LoopThread()
    return _thread


def fleet_of(user_class: type[XdsUser]) -> Fleet | None:
    """The fleet a user class runs in this process (None before its first user)."""
    return _fleets.get(user_class)


def _on_init(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, MasterRunner):
        return  # the master runs no users
    loop_thread()  # now, before anything can yield


def _on_quitting(environment: Environment, **_: Any) -> None:
    global _thread  # noqa: PLW0603
    if _thread is not None:
        _thread.stop(list(_fleets.values()))
        _thread = None


def listen(hook: Any, handler: Callable[..., None]) -> None:
    """``hook.add_listener(handler)`` (Locust's ``add_listener`` is untyped)."""
    hook.add_listener(handler)


listen(events.init, _on_init)
listen(events.quitting, _on_quitting)


class XdsUser(User):
    """A Locust user that runs ``clients_per_user`` simulated xDS clients.

    The server is Locust's ``--host`` (``HOST:PORT``). Class attributes set what the
    clients do (the fields of :class:`~xds_client.load.FleetOptions`). The user's
    task only waits: the clients run on their own and report as they go.
    """

    abstract = True
    wait_time = constant(1.0)

    clients_per_user: ClassVar[int] = 10
    protocol: ClassVar[str] = "sotw"
    profile: ClassVar[str] = "envoy"
    listener: ClassVar[str] = SAMPLE_LISTENER
    validate: ClassVar[bool] = False
    node_cluster: ClassVar[str] = "load"
    node_id: ClassVar[str] = ""
    """Template with ``{i}``; default: ``locust-HOST-PID-{i}``, unique per process."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self._batch: list[int] = []

    def _fleet(self) -> Fleet:
        """This class's fleet in this process (loop thread only)."""
        cls = type(self)
        fleet = _fleets.get(cls)
        if fleet is None:
            host = self.host or self.environment.host or ""
            fleet = _fleets[cls] = Fleet(
                FleetOptions(
                    server=host.removeprefix("grpc://").rstrip("/"),
                    nodes=max(1, cls.clients_per_user),
                    protocol=cls.protocol,  # type: ignore[arg-type]
                    profile=cls.profile,  # type: ignore[arg-type]
                    listener=cls.listener,
                    validate=cls.validate,
                    cluster=cls.node_cluster,
                    node_id=cls.node_id or f"locust-{socket.gethostname()}-{os.getpid()}-{{i}}",
                ),
                on_event=self._report,
            )
        return fleet

    def _report(self, event: LoadEvent) -> None:
        """From the loop thread: hand the event to Locust on the gevent side."""
        fire = self.environment.events.request.fire
        failure = None
        if event.kind in ("nack", "error"):
            failure = Exception(f"{event.name}: {event.detail}" if event.detail else event.name)
        name = "stream error" if event.kind == "error" else event.name

        def deliver() -> None:
            fire(
                request_type="xDS",
                name=name,
                response_time=event.latency * 1000.0,
                response_length=0,
                exception=failure,
                context={"client": event.client},
            )

        thread = _thread  # never make a loop thread from the loop thread
        if thread is not None:
            thread.to_gevent(deliver)

    def on_start(self) -> None:
        loop_thread().call(self._start_batch)

    def _start_batch(self) -> None:
        fleet = self._fleet()
        count = type(self).clients_per_user
        try:
            check_fd_limit(fleet.started + count)
        except UsageError as exc:
            self._report(LoadEvent("error", "fd limit", 0.0, -1, str(exc)))
            return
        self._batch = fleet.add(count)

    def on_stop(self) -> None:
        loop_thread().call(self._stop_batch)

    def _stop_batch(self) -> None:
        fleet = _fleets.get(type(self))
        batch, self._batch = self._batch, []
        if fleet is not None:
            for index in batch:
                asyncio.get_running_loop().create_task(fleet.remove(index))

    @task
    def hold(self) -> None:
        """Nothing to do: the simulated clients run on the loop thread."""
