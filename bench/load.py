"""Simulated xDS clients per core, and memory per simulated client (``xds_client.load``).

The server is a :class:`~xds_client.testing.ControlPlane` in its own process
(``python -m bench.load serve CLUSTERS``) serving the sample config (one listener,
one route, CLUSTERS EDS clusters with 3 endpoints each); it changes every
cluster's endpoints (one EDS push of CLUSTERS resources) when the parent writes a
line to its stdin. The fleet runs in this process, Envoy-like (LDS and CDS
wildcard, then RDS and EDS by name, SotW over ADS), ramped at 500 clients/s.

For each fleet size: RSS per client (this process's RSS once every client holds a
complete config, less its RSS before, over N), then PUSHES pushes, each waited for
until every client ACKed it: push-to-ACK p50/p99 (from the first client's receipt
to each ACK) and this process's CPU seconds per pushed client (process time,
gRPC's threads included). Clients per core is the largest size whose p99 stays
under 1 s. Each size runs in a fresh process. ``python -m bench.load [--go] 500 1000``
runs chosen sizes alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from bench._harness import Config, Row, rss_bytes
from bench._server import ServerProcess

SCENARIO = "load"
ORDER = 90

CLUSTERS = 50
PUSHES = 3
SIZES = (250, 500, 1000, 2000)
SMOKE_SIZES = (10,)
RAMP_RATE = 500.0
_TIMEOUT = 300.0


@dataclass
class Step:
    """What one fleet size measured."""

    server: str
    clients: int
    complete: int
    rss_per_client: float
    first_config_p99: float | None
    push_p50: float | None
    push_p99: float | None
    convergence_max: float
    cpu_per_client_push: float
    client_cpu_share: float
    """This process's CPU time over wall time while the pushes fanned out (1.0: one core)."""
    errors: dict[str, int]


def _serve(clusters: int, clients: int) -> None:
    """Child: serve the sample config; one EDS push per line read on stdin."""
    from xds_client.load import sample_config, sample_endpoints
    from xds_client.testing import ControlPlane

    workers = 2 * clients + 64  # the ControlPlane holds a worker thread per stream
    with ControlPlane(rest_port=None, heartbeat_interval=None, max_workers=workers) as cp:
        cp.set_snapshot(sample_config(clusters))
        print(cp.address, flush=True)
        for step, _ in enumerate(sys.stdin, start=1):
            cp.set_resources("eds", sample_endpoints(clusters, revision=step))
            print("ok", flush=True)


def _serve_go(clusters: int, clients: int) -> None:
    """Child: go-control-plane with per-node snapshots for LDS/RDS/CDS and EDS from a
    LinearCache shared by every node, so one upsert (one line on stdin: one cluster's
    endpoints move) is one push to the whole fleet. (A per-node snapshot push would time
    the driver's N sequential SetSnapshot calls, not the fan-out.) Its own process: the
    wrapper logs every request and response, which must not load the client's."""
    from tests.peers.go_control_plane import GoControlPlane
    from xds_client.load import sample_config, sample_endpoints
    from xds_client.resources import resource_type

    with GoControlPlane(linear_type=resource_type("eds").type_url) as peer:
        config = sample_config(clusters)
        for assignment in config.pop("eds"):
            peer.upsert(assignment)
        snapshot = {resource_type(alias).type_url: items for alias, items in config.items()}
        for i in range(clients):
            peer.set_snapshot(f"node-{i}", snapshot, "1")
        print(peer.address, flush=True)
        for step, _ in enumerate(sys.stdin, start=1):
            peer.upsert(sample_endpoints(1, revision=step)[0])
            print("ok", flush=True)


class _Server:
    """The server process (``serve`` or ``serve-go``), driven over its stdin."""

    def __init__(self, clusters: int, clients: int, kind: str = "serve") -> None:
        env = dict(os.environ)
        env.setdefault("GRPC_VERBOSITY", "ERROR")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.load", kind, str(clusters), str(clients)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.process.stdout is not None
        self.address = self.process.stdout.readline().strip()
        if not self.address:
            raise RuntimeError(f"the bench server ({kind}) did not start")

    async def push(self, step: int) -> None:
        def one() -> None:
            assert self.process.stdin is not None
            assert self.process.stdout is not None
            self.process.stdin.write(f"{step}\n")
            self.process.stdin.flush()
            self.process.stdout.readline()

        await asyncio.to_thread(one)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _go_available() -> str:
    """ "" when the go-control-plane peer can run, else why not."""
    try:
        from tests.peers.go_control_plane import peer_binary
    except ImportError:
        return "tests/peers/go_control_plane is not part of this tree"
    binary, why = peer_binary()
    return "" if binary is not None else why


def _settled_rss() -> int:
    gc.collect()
    return rss_bytes()


async def measure(
    address: str, clients: int, push: _Server | None, pushes: int, server: str
) -> Step:
    """Ramp a fleet up, push ``pushes`` times, and measure."""
    from xds_client.load import Fleet, FleetOptions, check_fd_limit

    check_fd_limit(clients)
    # Warm up (imports, gRPC's threads, the protocol core's caches) with a small fleet
    # of other nodes, so the RSS difference is the fleet's own.
    warm = Fleet(FleetOptions(server=address, nodes=1, node_id="warm-{i}"))
    warm.add(1)
    with contextlib.suppress(Exception):
        await warm.wait_complete(1, timeout=5.0)
    await warm.stop()
    rss0 = _settled_rss()
    fleet = Fleet(FleetOptions(server=address, nodes=clients, connect_timeout=30.0))
    loop = asyncio.get_running_loop()
    start = loop.time()
    launched = 0
    while launched < clients:
        due = min(clients, int((loop.time() - start) * RAMP_RATE) + 1)
        fleet.add(due - launched)
        launched = due
        await asyncio.sleep(0.02)
    await fleet.wait_complete(clients, timeout=_TIMEOUT)
    rss1 = _settled_rss()
    cpu = wall = 0.0
    for step in range(1, pushes + 1 if push is not None else 1):
        assert push is not None
        t0, w0 = time.process_time(), loop.time()
        await push.push(step)
        deadline = loop.time() + _TIMEOUT
        while len(fleet.recorder.push_to_ack.get("EDS", ())) < clients * step:
            if loop.time() > deadline:
                break
            await asyncio.sleep(0.01)
        cpu += time.process_time() - t0
        wall += loop.time() - w0
        await asyncio.sleep(0.5)  # let the ACK writes drain before the next push
    report = fleet.report()
    await fleet.stop()
    eds = report.push_to_ack.get("EDS")
    return Step(
        server=server,
        clients=clients,
        complete=report.clients_complete,
        rss_per_client=(rss1 - rss0) / clients,
        first_config_p99=report.first_config.p99,
        push_p50=eds.p50 if eds else None,
        push_p99=eds.p99 if eds else None,
        convergence_max=max((v.convergence for v in report.versions), default=0.0),
        cpu_per_client_push=cpu / (clients * max(1, pushes)),
        client_cpu_share=cpu / wall if wall else 0.0,
        errors=report.errors,
    )


def run_step(
    clients: int, pushes: int = PUSHES, clusters: int = CLUSTERS, server: str = "ControlPlane"
) -> Step:
    """One fleet size in a fresh process (so its RSS is its own) against a fresh server
    (``ControlPlane`` or ``go-control-plane``)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.load", "one", server, str(clients), str(pushes),
         str(clusters)],
        capture_output=True, text=True, timeout=3 * _TIMEOUT, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"bench.load one {server} {clients} failed: {done.stderr[-2000:]}")
    return Step(**json.loads(done.stdout.strip().splitlines()[-1]))


def _one(server: str, clients: int, pushes: int, clusters: int) -> Step:
    kind = "serve-go" if server == "go-control-plane" else "serve"
    plane = _Server(clusters, clients, kind)
    try:
        return asyncio.run(measure(plane.address, clients, plane, pushes, server))
    finally:
        plane.close()


def _describe(step: Step) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.0f} ms"

    return (
        f"{step.server}, {step.clients} clients: {step.complete} complete, first config p99 "
        f"{ms(step.first_config_p99)}, push-to-ACK p50 {ms(step.push_p50)} p99 "
        f"{ms(step.push_p99)}, convergence max {ms(step.convergence_max)}, "
        f"{step.rss_per_client / 1024:.1f} KiB/client, "
        f"{step.cpu_per_client_push * 1e6:.0f} us CPU/client/push, client process at "
        f"{step.client_cpu_share:.0%} of a core during pushes, errors {step.errors or 0}"
    )


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    """Rows of ``make bench``: each server, each size until p99 passes 1 s."""
    rows: list[Row] = []
    servers = ["ControlPlane"]
    why = "not in --smoke" if cfg.smoke else _go_available()
    if not why:
        servers.append("go-control-plane")
    else:
        print(f"# load: go-control-plane skipped: {why}", file=sys.stderr)
    for name in servers:
        rows += _rows(name, cfg)
    return rows


def _rows(name: str, cfg: Config) -> list[Row]:
    sizes = SMOKE_SIZES if cfg.smoke else SIZES
    pushes = 1 if cfg.smoke else PUSHES
    rows: list[Row] = []
    best = 0
    for clients in sizes:
        step = run_step(clients, pushes, server=name)
        print(f"# load: {_describe(step)}", file=sys.stderr, flush=True)
        ok = step.push_p99 is not None and step.push_p99 < 1.0 and step.complete == clients
        if ok:
            best = clients
        rows.append(
            Row(
                SCENARIO, f"{name}: {clients} Envoy-like clients, {CLUSTERS} clusters: "
                "push-to-ACK p99", "ms", (step.push_p99 or float("nan")) * 1000, None,
                target="< 1000 ms", check=lambda row: row.sdk < 1000, note=_describe(step),
            )
        )  # fmt: skip
        rows.append(
            Row(
                SCENARIO, f"{name}: {clients} Envoy-like clients: RSS per simulated client",
                "KiB", step.rss_per_client / 1024, None, target="< 100 KiB",
                check=lambda row: row.sdk < 100,
            )
        )  # fmt: skip
        if not ok:
            break  # larger fleets only take longer to fail
    rows.append(
        Row(
            SCENARIO, f"{name}: simulated clients in one process with push-to-ACK p99 < 1 s",
            "clients", float(best), None, better="higher", target=">= 2000",
            check=lambda row: row.sdk >= 2000,
        )
    )  # fmt: skip
    return rows


def main(argv: list[str]) -> int:
    """``serve CLUSTERS`` (the server child), or ``[--go] SIZE ...``: chosen sizes alone."""
    if argv[:1] == ["serve"]:
        _serve(int(argv[1]), int(argv[2]))
        return 0
    if argv[:1] == ["serve-go"]:
        _serve_go(int(argv[1]), int(argv[2]))
        return 0
    if argv[:1] == ["one"]:
        step = _one(argv[1], int(argv[2]), int(argv[3]), int(argv[4]))
        print(json.dumps(dataclasses.asdict(step)), flush=True)
        return 0
    server = "ControlPlane"
    if argv[:1] == ["--go"]:
        server, argv = "go-control-plane", argv[1:]
    for clients in [int(a) for a in argv] or list(SIZES):
        print(_describe(run_step(clients, server=server)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
