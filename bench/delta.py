"""Delta lockstep: N single-resource updates, the server waiting for each ACK.

The server stamps each response just before handing it to gRPC; the client
stamps it when the watcher (SDK) or the dict (raw) has it. Both run on the
same monotonic clock (CLOCK_MONOTONIC is system-wide on Linux).
"""

from __future__ import annotations

import time
from typing import Any

from bench._clients import RawStream, node
from bench._data import CDS
from bench._harness import Config, Row, median, ratio_at_least, ratio_at_most
from bench._server import ServerProcess

_TIMEOUT = 60.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(sent: list[float], got: list[float]) -> tuple[float, float, float]:
    """(updates/s, p50 µs, p99 µs) of one run."""
    n = min(len(sent), len(got))
    latencies = [(got[i] - sent[i]) * 1e6 for i in range(n)]
    rate = n / (got[n - 1] - sent[0])
    return rate, _percentile(latencies, 0.5), _percentile(latencies, 0.99)


def _sdk_once(server: ServerProcess, cfg: Config) -> tuple[float, float, float]:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from xds_client import ResourceUpdated, XdsClient

    n = cfg.delta_updates
    got = [0.0] * n
    server.call("reset")
    with XdsClient(
        server.address, node=node(), protocol="delta", does_not_exist_timeout=None
    ) as client:
        watch = client.watch(Cluster)
        server.call("wait_streams", "delta", 1, 30.0)
        server.post("lockstep")
        seen = 0
        while seen < n:
            event = watch.get(timeout=_TIMEOUT)
            if isinstance(event, ResourceUpdated):
                got[int(event.version)] = time.perf_counter()
                seen += 1
        sent: list[float] = server.reply()
        watch.close()
    return _summary(sent, got)


def _raw_once(server: ServerProcess, cfg: Config) -> tuple[float, float, float]:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryRequest

    n = cfg.delta_updates
    got = [0.0] * n
    server.call("reset")
    stream = RawStream(server.address, delta=True)
    try:
        stream.send(
            DeltaDiscoveryRequest(node=node(), type_url=CDS, resource_names_subscribe=["*"])
        )
        server.call("wait_streams", "delta", 1, 30.0)
        server.post("lockstep")
        cache: dict[str, Any] = {}
        for _ in range(n):
            response = stream.recv()
            for resource in response.resources:
                cache[resource.name] = Cluster.FromString(resource.resource.value)
                got[int(resource.version)] = time.perf_counter()
            stream.send(DeltaDiscoveryRequest(type_url=CDS, response_nonce=response.nonce))
        sent: list[float] = server.reply()
    finally:
        stream.close()
    return _summary(sent, got)


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    server.call("prepare_lockstep", cfg.delta_updates, cfg.delta_names)
    sdk: list[tuple[float, float, float]] = []
    raw: list[tuple[float, float, float]] = []
    for _ in range(cfg.reps):
        raw.append(_raw_once(server, cfg))
        sdk.append(_sdk_once(server, cfg))
    scenario = f"delta lockstep, {cfg.delta_updates:,} single-resource updates"
    rows = []
    for index, (metric, unit, better, target, check) in enumerate(
        [
            ("updates/s", "/s", "higher", ">= 0.85x raw", ratio_at_least(0.85)),
            ("p50 server send -> watcher", "µs", "lower", "<= 1.2x raw", ratio_at_most(1.2)),
            ("p99 server send -> watcher", "µs", "lower", "<= 1.2x raw", ratio_at_most(1.2)),
        ]
    ):
        s = [t[index] for t in sdk]
        r = [t[index] for t in raw]
        rows.append(
            Row(
                scenario, metric, unit, median(s), median(r), better=better,  # type: ignore[arg-type]
                target=target, check=check, samples_sdk=s, samples_raw=r,
            )
        )  # fmt: skip
    return rows
