"""A fleet of simulated xDS clients in one asyncio loop, and the scenarios it runs."""

from __future__ import annotations

import asyncio
import random
import resource
from collections.abc import Callable

from envoy.config.core.v3.base_pb2 import Node

from xds_client.errors import TransportError, UsageError, WaitTimeoutError
from xds_client.protocol import ProtocolConfig

from ._client import SimClient
from ._drivers import UpdateDriver
from ._metrics import ClientStats, LoadEvent, Recorder, Report, Sample, summarize
from ._options import FleetOptions
from ._profile import References

__all__ = ["Fleet", "FleetOptions", "check_fd_limit"]

# Descriptors the process needs besides one socket per client: stdio, gRPC's
# pollers and wakeup fds, the event loop, files. Measured: about 20 at rest.
FD_RESERVE = 64


def check_fd_limit(clients: int) -> int:
    """Make room for ``clients`` connections: raise the soft RLIMIT_NOFILE up to the hard
    one if needed; returns the limit in force. :class:`UsageError` when it cannot be."""
    needed = clients + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return needed if soft == resource.RLIM_INFINITY else soft
    if hard == resource.RLIM_INFINITY or hard >= needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        return needed
    raise UsageError(
        f"{clients} clients need about {needed} file descriptors (one connection each), "
        f"but this process may open at most {hard} (ulimit -n); raise the hard limit or "
        f"run fewer clients per process (Locust spreads them over processes and machines)"
    )


class Fleet:
    """Simulated xDS clients sharing one asyncio loop; each has its own node, HTTP/2
    connection and ADS stream.

    ``await Fleet(options).run()`` runs the whole scenario (ramp, hold, storm, churn,
    pushes) and returns a :class:`Report`. :meth:`add`, :meth:`drop_all` and
    :meth:`stop` drive a fleet piece by piece (the Locust user does).
    """

    def __init__(
        self,
        options: FleetOptions,
        *,
        driver: UpdateDriver | None = None,
        on_event: Callable[[LoadEvent], None] | None = None,
        progress: Callable[[Sample], None] | None = None,
    ) -> None:
        if options.push_interval is not None and driver is None:
            raise UsageError("push_interval needs a driver that changes the server's config")
        self.options = options
        self.driver = driver
        self.recorder = Recorder(on_event)
        self.references = References()
        self.progress = progress
        self.clients: dict[int, SimClient] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.started = 0
        self.first_response_seen = False
        self.last_error = ""
        self._next_index = options.first_index
        self._configs: dict[bool, ProtocolConfig] = {}
        self._storm: dict[str, float | int | None] | None = None
        self._storm_clients: set[int] = set()
        self._t0: float | None = None
        self._run_start = 0.0
        self._bytes_in = 0  # of clients already removed
        self._bytes_out = 0
        self._gone: list[ClientStats] = []

    # -------------------------------------------------------------- clients

    def _node(self, i: int) -> Node:

        o = self.options
        node = Node(id=o.node_id.format(i=i), cluster=o.cluster.format(i=i))
        node.locality.region = o.region.format(i=i)
        node.locality.zone = o.zone.format(i=i)
        node.locality.sub_zone = o.sub_zone.format(i=i)
        node.user_agent_name = "xds-client-load"
        for key, value in o.metadata.items():
            node.metadata.fields[key].string_value = value.format(i=i)
        return node

    def _config(self, node: Node) -> ProtocolConfig:
        envoy = self.options.profile == "envoy"
        return ProtocolConfig(
            node=node,
            # Envoy sends node in every request and NACKs a whole response with code 13;
            # gRPC sends it once, applies the valid resources and NACKs with code 3.
            node_in_every_request=envoy,
            reject_whole_response=envoy,
            nack_code=13 if envoy else 3,
            does_not_exist_timeout=None,  # timers need ticks; a load run has no use for them
            validate_rules=self.options.validate,
            lazy_decode=not self.options.keep_messages,
        )

    def _loop_time(self) -> float:
        return asyncio.get_running_loop().time()

    def add(self, count: int = 1) -> list[int]:
        """Start ``count`` clients now (inside the running loop); returns their indexes."""
        if self._t0 is None:
            self._t0 = self.recorder.t0 = self._loop_time()
        out = []
        for _ in range(count):
            i = self._next_index
            self._next_index += 1
            node = self._node(i)
            client = SimClient(i, node, self, self._config(node))
            self.clients[i] = client
            task = self.tasks[i] = asyncio.create_task(client.run(), name=f"xds-load-{i}")
            task.add_done_callback(self._client_done)
            self.started += 1
            out.append(i)
        return out

    def _client_done(self, task: asyncio.Task[None]) -> None:
        # A client that crashed is a bug of ours: count it and say it, never lose it.
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        self.recorder.errors[f"client error {type(exc).__name__}"] += 1
        self.last_error = f"{type(exc).__name__}: {exc}"

    async def remove(self, index: int) -> None:
        """Stop one client and wait for its connection to close."""
        client = self.clients.pop(index, None)
        task = self.tasks.pop(index, None)
        if client is None or task is None:
            return
        client.stop()
        await _finish([task])
        self._bytes_in += client.bytes_in
        self._bytes_out += client.bytes_out
        self._gone.append(client.stats())

    async def wait_complete(self, count: int | None = None, *, timeout: float = 30.0) -> None:
        """Wait until ``count`` clients (default: all running) hold a complete config on
        their current stream; :class:`~xds_client.errors.WaitTimeoutError` after ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            want = len(self.clients) if count is None else count
            done = sum(1 for c in self.clients.values() if c.complete)
            if done >= want:
                return
            if loop.time() > deadline:
                raise WaitTimeoutError(
                    f"{done} of {want} clients hold a complete config after {timeout:g} s"
                    + (f" (last error {self.last_error})" if self.last_error else "")
                )
            await asyncio.sleep(0.01)

    def drop_all(self) -> int:
        """A reconnect storm: drop every stream at once; returns how many were dropped."""
        now = self._loop_time()
        self._storm_clients = set(self.clients)
        self._storm = {
            "at": now - (self._t0 or now),
            "clients": len(self._storm_clients),
            "recovered": 0,
            "recovery": None,
            "_t": now,
        }
        for client in self.clients.values():
            client.drop()
        return len(self._storm_clients)

    def _client_completed(self, client: SimClient, now: float) -> None:
        """A client holds a complete config on its current stream (the clients call it)."""
        storm = self._storm
        if storm is None or client.index not in self._storm_clients:
            return
        self._storm_clients.discard(client.index)
        storm["recovered"] = int(storm["recovered"] or 0) + 1
        if not self._storm_clients:
            storm["recovery"] = round(now - float(storm["_t"] or 0.0), 6)

    async def stop(self) -> None:
        """Stop every client and close its connection."""
        clients = list(self.clients.values())
        tasks = list(self.tasks.values())
        for client in clients:
            client.stop()
        await _finish(tasks)
        self.clients.clear()
        self.tasks.clear()

    # -------------------------------------------------------------- measuring

    def sample(self) -> Sample:
        """The fleet now (also appended to the time series by :meth:`run`)."""
        now = self._loop_time()
        clients = self.clients.values()
        r = self.recorder
        return Sample(
            t=round(now - (self._t0 or now), 3),
            started=self.started,
            connected=sum(1 for c in clients if c.connected),
            complete=sum(1 for c in clients if c.complete),
            acks=r.acks,
            nacks=r.nacks,
            errors=sum(r.errors.values()),
        )

    def report(self, *, failure: str = "") -> Report:
        """The measurements so far."""
        r = self.recorder
        clients = list(self.clients.values())
        storm = None
        if self._storm is not None:
            storm = {k: v for k, v in self._storm.items() if not k.startswith("_")}
        now = self._loop_time()
        return Report(
            server=self.options.server,
            protocol=self.options.protocol,
            profile=self.options.profile,
            nodes=self.options.nodes,
            duration=round(now - (self._t0 or now), 3),
            clients_started=self.started,
            clients_complete=len(r.first_config),
            peak_connected=max([s.connected for s in r.samples] + [0]),
            first_config=summarize(r.first_config),
            push_to_ack={t: summarize(v) for t, v in r.push_to_ack.items()},
            versions=r.version_results(),
            nacks=r.nacks,
            reconnects=r.reconnects,
            errors=dict(r.errors),
            bytes_received=self._bytes_in + sum(c.bytes_in for c in clients),
            bytes_sent=self._bytes_out + sum(c.bytes_out for c in clients),
            resources_held=sum(c.resources_held() for c in clients),
            storm=storm,
            series=list(r.samples),
            clients=sorted([*self._gone, *(c.stats() for c in clients)], key=lambda c: c.index),
            failure=failure,
        )

    # -------------------------------------------------------------- the scenario

    async def run(self) -> Report:
        """Ramp up, hold, storm, churn and push as the options say; stop; report.

        Raises :class:`~xds_client.errors.UsageError` when the process cannot open
        that many connections, and :class:`~xds_client.errors.TransportError` when no
        client received anything within ``connect_timeout`` (server unreachable, or
        refusing every stream).
        """
        o = self.options
        check_fd_limit(o.nodes)
        failure = ""
        sampler = asyncio.create_task(self._sample_every_second())
        try:
            await self._ramp()
            await self._hold()
        except _UnreachableError as exc:
            failure = str(exc)
        finally:
            sampler.cancel()
            await _finish([sampler])
            self.recorder.samples.append(self.sample())
            report = self.report(failure=failure)
            await self.stop()
        if failure and not self.first_response_seen:
            raise TransportError(failure)
        return report

    async def _ramp(self) -> None:
        o = self.options
        loop = asyncio.get_running_loop()
        start = self._run_start = loop.time()
        launched = 0
        while launched < o.nodes:
            due = min(o.nodes, int((loop.time() - start) * o.rate) + 1)
            if due > launched:
                self.add(due - launched)
                launched = due
            self._check_reachable(start)
            await asyncio.sleep(min(0.05, 1.0 / o.rate))

    async def _hold(self) -> None:
        o = self.options
        loop = asyncio.get_running_loop()
        start = loop.time()
        end = start + o.duration
        storm_due = None if o.storm_at is None else start + o.storm_at
        churn_gap = 60.0 / (o.churn * o.nodes) if o.churn > 0 else None
        next_churn = None if churn_gap is None else start + churn_gap
        next_push = None if o.push_interval is None else start + o.push_interval
        step = 0
        pushes: list[asyncio.Task[None]] = []
        while (now := loop.time()) < end:
            self._check_reachable(self._run_start)
            if storm_due is not None and now >= storm_due:
                storm_due = None
                self.drop_all()
            if next_churn is not None and churn_gap is not None and now >= next_churn:
                next_churn += churn_gap
                if self.clients:
                    await self.remove(random.choice(list(self.clients)))
                    self.add(1)
            if next_push is not None and o.push_interval is not None and now >= next_push:
                next_push += o.push_interval
                step += 1
                assert self.driver is not None
                pushes.append(asyncio.create_task(self.driver.push(step)))
            for push in [p for p in pushes if p.done()]:
                pushes.remove(push)
                push.result()  # a driver's failure ends the run now, not at its end
            wake = [end, *(t for t in (storm_due, next_churn, next_push) if t is not None)]
            await asyncio.sleep(max(0.0, min(0.1, min(wake) - loop.time())))
        for push in pushes:
            await push  # a driver's failure is the run's failure

    def _check_reachable(self, start: float) -> None:
        if self.first_response_seen:
            return
        if self._loop_time() - start < self.options.connect_timeout:
            return
        raise _UnreachableError(self._unreachable_message())

    def _unreachable_message(self) -> str:
        o = self.options
        last = self.last_error or "no answer"
        if last.startswith("UNAVAILABLE") or last == "no answer":
            return (
                f"cannot reach the xDS server at {o.server}: no client received a response "
                f"in {o.connect_timeout:g} s (last error {last})"
            )
        return (
            f"the xDS server at {o.server} refused every stream for "
            f"{o.connect_timeout:g} s (last error {last})"
        )

    async def _sample_every_second(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            sample = self.sample()
            self.recorder.samples.append(sample)
            if self.progress is not None:
                self.progress(sample)


class _UnreachableError(Exception):
    """Nothing came back from the server in time."""


async def _finish(tasks: list[asyncio.Task[None]], timeout: float = 10.0) -> None:
    """Wait for tasks told to stop; cancel the ones that do not within ``timeout``."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=timeout)
