"""Time to first full config, and to converge after an update: go-control-plane vs ControlPlane.

    python -m bench._go_peer [--clusters 100] [--reps 5]

Not a ``make bench`` scenario (the peer needs Go; the name starts with ``_`` so the
registry skips it). One AsyncXdsClient follows one listener through ``watch_config``:
an api_listener, a route configuration with one virtual host per cluster, EDS clusters
and their endpoints. "first" is from creating the client to the first complete
snapshot; "update" is from setting a snapshot that moves every endpoint to the first
snapshot that shows all of them moved. Medians of ``--reps`` runs, on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from envoy.config.route.v3.route_components_pb2 import (
    Route,
    RouteAction,
    RouteMatch,
    VirtualHost,
)
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from google.protobuf.message import Message

from tests.interop._interop_helpers import api_listener, eds_cluster, endpoints
from tests.peers.go_control_plane import GoControlPlane, peer_binary
from xds_client import AsyncXdsClient, Node
from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE
from xds_client.testing import ControlPlane

NODE = "bench-peer"
SetSnapshot = Callable[[dict[str, list[Message]], str], None]


def graph(clusters: int, port: int) -> dict[str, list[Message]]:
    names = [f"cluster-{i:05d}" for i in range(clusters)]
    hosts = [
        VirtualHost(
            name=n,
            domains=[f"{n}.example"],
            routes=[Route(match=RouteMatch(prefix="/"), route=RouteAction(cluster=n))],
        )
        for n in names
    ]
    return {
        LISTENER: [api_listener("svc", "routes")],
        ROUTE: [RouteConfiguration(name="routes", virtual_hosts=hosts)],
        CLUSTER: [eds_cluster(n) for n in names],
        ENDPOINT: [endpoints(n, port) for n in names],
    }


def moved(snapshot: Any, port: int) -> bool:
    return bool(snapshot.ok) and all(
        e.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value == port
        for e in snapshot.endpoints.values()
    )


async def one_run(
    address: str, set_snapshot: SetSnapshot, clusters: int, protocol: str
) -> tuple[float, float]:
    set_snapshot(graph(clusters, 1001), "1")
    start = time.perf_counter()
    client = AsyncXdsClient(address, node=Node(NODE), protocol=protocol)  # type: ignore[arg-type]
    async with client, client.watch_config("svc") as config:
        snapshot = await config.get(timeout=60)
        while not (snapshot.ok and len(snapshot.clusters) == clusters):
            snapshot = await config.get(timeout=60)
        first = time.perf_counter() - start
        start = time.perf_counter()
        set_snapshot(graph(clusters, 1002), "2")
        while not moved(snapshot, 1002):
            snapshot = await config.get(timeout=60)
        return first, time.perf_counter() - start


async def measure(server: str, protocol: str, clusters: int, reps: int) -> tuple[float, float]:
    firsts: list[float] = []
    updates: list[float] = []
    for _ in range(reps):
        if server == "go-control-plane":
            with GoControlPlane(ads=True) as peer:

                def set_go(resources: dict[str, list[Message]], version: str) -> None:
                    peer.set_snapshot(NODE, resources, version)

                first, update = await one_run(peer.address, set_go, clusters, protocol)
        else:
            with ControlPlane() as cp:

                def set_cp(resources: dict[str, list[Message]], version: str) -> None:
                    cp.set_snapshot(resources, version=version)

                first, update = await one_run(cp.address, set_cp, clusters, protocol)
        firsts.append(first)
        updates.append(update)
    return statistics.median(firsts), statistics.median(updates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._go_peer", description=__doc__)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    binary, why = peer_binary()
    if binary is None:
        print(why, file=sys.stderr)
        return 1
    print("| server | protocol | first full config (ms) | converge after update (ms) |")
    print("|---|---|---:|---:|")
    for server in ("go-control-plane", "ControlPlane"):
        for protocol in ("sotw", "delta"):
            first, update = asyncio.run(measure(server, protocol, args.clusters, args.reps))
            print(f"| {server} | {protocol} | {first * 1000:.0f} | {update * 1000:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
