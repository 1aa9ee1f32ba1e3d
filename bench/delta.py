"""Delta: N single-resource updates, in lockstep (the server waits for each ACK) and as a firehose.

The server stamps each response just before handing it to gRPC; the client
stamps it when the watcher (SDK) or the dict (raw) has it. Both run on the
same monotonic clock (CLOCK_MONOTONIC is system-wide on Linux). In the
firehose the server sends all N responses without waiting; ACKs are still sent
by both clients. Updates/s is N over the time from the first send to the last
delivery.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench._clients import RawStream, node
from bench._data import CDS
from bench._harness import Config, Row, median, ratio_at_least, ratio_at_most
from bench._server import ServerProcess

SCENARIO = "delta"
ORDER = 20

_TIMEOUT = 60.0
Result = tuple[float, float, float]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(sent: list[float], got: list[float]) -> Result:
    """(updates/s, p50 µs, p99 µs) of one run."""
    n = min(len(sent), len(got))
    latencies = [(got[i] - sent[i]) * 1e6 for i in range(n)]
    rate = n / (max(got[:n]) - sent[0])
    return rate, _percentile(latencies, 0.5), _percentile(latencies, 0.99)


def _sdk_once(server: ServerProcess, cfg: Config, mode: str) -> Result:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from xds_client import ResourceUpdated, XdsClient

    n = cfg.delta_updates
    got = [0.0] * n
    server.call("reset")
    with XdsClient(
        server.address, node=node(), protocol="delta", does_not_exist_timeout=None,
        queue_size=max(1000, n),
    ) as client:  # fmt: skip
        watch = client.watch(Cluster)
        server.call("wait_streams", "delta", 1, 30.0)
        server.post(mode)
        seen = 0
        while seen < n:
            event = watch.get(timeout=_TIMEOUT)
            if isinstance(event, ResourceUpdated):
                got[int(event.version)] = time.perf_counter()
                seen += 1
        sent: list[float] = server.reply()
        watch.close()
    return _summary(sent, got)


async def _aio_main(server: ServerProcess, cfg: Config, mode: str) -> Result:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from xds_client import AsyncXdsClient, ResourceUpdated

    n = cfg.delta_updates
    got = [0.0] * n
    server.call("reset")
    async with AsyncXdsClient(
        server.address, node=node(), protocol="delta", does_not_exist_timeout=None,
        queue_size=max(1000, n),
    ) as client:  # fmt: skip
        watch = client.watch(Cluster)
        await asyncio.to_thread(server.call, "wait_streams", "delta", 1, 30.0)
        server.post(mode)
        seen = 0
        while seen < n:
            event = await watch.get(timeout=_TIMEOUT)
            if isinstance(event, ResourceUpdated):
                got[int(event.version)] = time.perf_counter()
                seen += 1
        sent: list[float] = await asyncio.to_thread(server.reply)
        watch.close()
    return _summary(sent, got)


def _aio_once(server: ServerProcess, cfg: Config, mode: str) -> Result:
    return asyncio.run(_aio_main(server, cfg, mode))


def _raw_once(server: ServerProcess, cfg: Config, mode: str) -> Result:
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
        server.post(mode)
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


def _check(better: str, limit: float) -> Any:
    return ratio_at_least(limit) if better == "higher" else ratio_at_most(limit)


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    server.call("prepare_lockstep", cfg.delta_updates, cfg.delta_names)
    rows: list[Row] = []
    metrics = {
        "lockstep": [
            ("updates/s", "/s", "higher", ">= 0.95x raw", 0.95),
            ("p50 server send -> watcher", "µs", "lower", "<= 1.15x raw", 1.15),
            ("p99 server send -> watcher", "µs", "lower", "<= 1.3x raw", 1.3),
        ],
        "firehose": [("updates/s", "/s", "higher", ">= 0.95x raw", 0.95)],
    }
    for mode, wanted in metrics.items():
        raw: list[Result] = []
        sdk: dict[str, list[Result]] = {"XdsClient": [], "AsyncXdsClient": []}
        for _ in range(cfg.reps):
            raw.append(_raw_once(server, cfg, mode))
            sdk["XdsClient"].append(_sdk_once(server, cfg, mode))
            sdk["AsyncXdsClient"].append(_aio_once(server, cfg, mode))
        scenario = f"delta {mode}, {cfg.delta_updates:,} single-resource updates"
        for index, (metric, unit, better, target, limit) in enumerate(wanted):
            r = [t[index] for t in raw]
            for client, runs in sdk.items():
                s = [t[index] for t in runs]
                rows.append(
                    Row(
                        scenario, f"{client}: {metric}", unit, median(s), median(r),
                        better=better,  # type: ignore[arg-type]
                        target=target, check=_check(better, limit), samples_sdk=s, samples_raw=r,
                    )
                )  # fmt: skip
    return rows
