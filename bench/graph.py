"""watch_config over N clusters: the first full config, and converging after an update.

One listener's graph: an api_listener, one route configuration with a virtual host per
cluster, N EDS clusters and their N endpoint resources, served by the ``ControlPlane``
in a child process (``python -m bench.graph serve N``: it reads ``PORT VERSION`` lines
and serves the graph with every endpoint on that port). "first" runs from creating the
client to the first complete snapshot of N clusters; "update" from the server's reply
that it holds a graph with every endpoint moved to the first snapshot that shows all of
them moved (every endpoint resource changes: N updates).

The raw column is the same AsyncXdsClient without the graph: four wildcard watches,
done when each holds what the snapshot needs (first) and when N endpoint updates
carrying the new port have arrived (update). The ratio is what the graph adds.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

from bench._harness import Config, Row, median
from bench._server import ServerProcess

SCENARIO = "graph"
ORDER = 60
_TIMEOUT = 120.0


class _Server:
    """The ControlPlane in a child process (the client's process keeps its GIL)."""

    def __init__(self, clusters: int) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.graph", "serve", str(clusters)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self._proc.stdout is not None
        self.address = self._proc.stdout.readline().strip()
        self._version = 0

    def serve(self, port: int) -> None:
        """Serve the graph with every endpoint on ``port`` (returns once it is set)."""
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._version += 1
        self._proc.stdin.write(f"{port} {self._version}\n")
        self._proc.stdin.flush()
        reply = self._proc.stdout.readline().strip()
        assert reply == "ok", reply

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)


def _serve(clusters: int) -> None:
    from bench._go_peer import graph
    from xds_client.testing import ControlPlane

    with ControlPlane() as cp:
        print(cp.address, flush=True)
        for line in sys.stdin:
            port, version = line.split()
            cp.set_snapshot(graph(clusters, int(port)), version=version)
            print("ok", flush=True)


def _port(assignment: Any) -> int:
    port: int = assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value
    return port


async def _with_graph(server: _Server, clusters: int) -> tuple[float, float]:
    from bench._clients import node
    from xds_client import AsyncXdsClient

    server.serve(1001)
    start = time.perf_counter()
    client = AsyncXdsClient(server.address, node=node())
    async with client, client.watch_config("svc") as config:
        snapshot = await config.get(timeout=_TIMEOUT)
        while not (snapshot.ok and len(snapshot.endpoints) == clusters):
            snapshot = await config.get(timeout=_TIMEOUT)
        first = time.perf_counter() - start
        server.serve(1002)
        start = time.perf_counter()
        while not (snapshot.ok and all(_port(e) == 1002 for e in snapshot.endpoints.values())):
            snapshot = await config.get(timeout=_TIMEOUT)
        return first, time.perf_counter() - start


async def _without_graph(server: _Server, clusters: int) -> tuple[float, float]:
    from bench._clients import node
    from xds_client import AsyncXdsClient, ResourceUpdated
    from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE

    server.serve(1001)
    start = time.perf_counter()
    async with AsyncXdsClient(server.address, node=node()) as client:
        needs = {LISTENER: 1, ROUTE: 1, CLUSTER: clusters, ENDPOINT: clusters}
        watches = {t: client.watch(t) for t in needs}
        seen: dict[str, set[str]] = {t: set() for t in needs}
        for type_url, watch in watches.items():
            while len(seen[type_url]) < needs[type_url]:
                event = await watch.get(timeout=_TIMEOUT)
                if isinstance(event, ResourceUpdated):
                    seen[type_url].add(event.name)
        first = time.perf_counter() - start
        server.serve(1002)
        start = time.perf_counter()
        moved: set[str] = set()
        while len(moved) < clusters:
            event = await watches[ENDPOINT].get(timeout=_TIMEOUT)
            if isinstance(event, ResourceUpdated) and _port(event.resource) == 1002:
                moved.add(event.name)
        elapsed = time.perf_counter() - start
        for watch in watches.values():
            watch.close()
        return first, elapsed


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    del server  # the graph needs a control plane that serves every type: ours
    n = cfg.graph_clusters
    samples: dict[str, list[float]] = {"gf": [], "gu": [], "rf": [], "ru": []}
    peer = _Server(n)
    try:
        # Untimed: the first use of each type compiles its (validate.rules) checker.
        asyncio.run(_without_graph(peer, n))
        for _ in range(cfg.reps):
            first, update = asyncio.run(_with_graph(peer, n))
            samples["gf"].append(first)
            samples["gu"].append(update)
            first, update = asyncio.run(_without_graph(peer, n))
            samples["rf"].append(first)
            samples["ru"].append(update)
    finally:
        peer.close()
    note = (
        "raw column: the same AsyncXdsClient with four wildcard watches and no graph; "
        "the ControlPlane in a child process, SotW over ADS"
    )
    return [
        Row(
            f"watch_config, {n:,} EDS clusters", "first full config", "s",
            median(samples["gf"]), median(samples["rf"]), target="reported", note=note,
            samples_sdk=samples["gf"], samples_raw=samples["rf"],
        ),
        Row(
            f"watch_config, {n:,} EDS clusters", f"converge after {n:,} endpoint updates",
            "s", median(samples["gu"]), median(samples["ru"]), target="reported",
            samples_sdk=samples["gu"], samples_raw=samples["ru"],
        ),
    ]  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve(int(sys.argv[2]))
