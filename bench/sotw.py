"""SotW: a push of N new clusters, then a re-push of the same N with 1% changed.

SDK: ``XdsClient`` (threads) or ``AsyncXdsClient`` (asyncio) with one wildcard
``watch(Cluster)``; the clock stops when the watcher has every update. Raw: the
generated ADS stub, ``Cluster.FromString`` of every resource into a dict, then
the ACK. Both sizes (``sotw_clusters`` and ``sotw_large``) run the same way.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from bench._clients import RawStream, node
from bench._data import CDS
from bench._harness import Config, Row, median, ratio_at_most
from bench._server import ServerProcess

SCENARIO = "sotw"
ORDER = 10

_TIMEOUT = 300.0
_WATCHERS = 10


def _sdk_once(server: ServerProcess, n: int, k: int, prefix: str) -> tuple[float, float]:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from xds_client import ResourceUpdated, XdsClient

    server.call("reset")
    with XdsClient(server.address, node=node(), does_not_exist_timeout=None) as client:
        watch = client.watch(Cluster)
        server.call("wait_streams", "sotw", 1, 30.0)
        times = []
        for name, expect in ((f"{prefix}_full", n), (f"{prefix}_changed", k)):
            start = time.perf_counter()
            server.post("send", "sotw", name)
            got = 0
            while got < expect:
                event = watch.get(timeout=_TIMEOUT)
                if isinstance(event, ResourceUpdated):
                    event.resource  # noqa: B018 - the message, as raw has it (lean: decoded here)
                    got += 1
            times.append(time.perf_counter() - start)
            server.reply()
        watch.close()
    return times[0], times[1]


async def _aio_main(server: ServerProcess, n: int, k: int, prefix: str) -> tuple[float, float]:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from xds_client import AsyncXdsClient, ResourceUpdated

    server.call("reset")
    async with AsyncXdsClient(server.address, node=node(), does_not_exist_timeout=None) as client:
        watch = client.watch(Cluster)
        await asyncio.to_thread(server.call, "wait_streams", "sotw", 1, 30.0)
        times = []
        for name, expect in ((f"{prefix}_full", n), (f"{prefix}_changed", k)):
            start = time.perf_counter()
            server.post("send", "sotw", name)
            got = 0
            while got < expect:
                event = await watch.get(timeout=_TIMEOUT)
                if isinstance(event, ResourceUpdated):
                    event.resource  # noqa: B018 - the message, as raw has it (lean: decoded here)
                    got += 1
            times.append(time.perf_counter() - start)
            server.reply()
        watch.close()
    return times[0], times[1]


def _aio_once(server: ServerProcess, n: int, k: int, prefix: str) -> tuple[float, float]:
    return asyncio.run(_aio_main(server, n, k, prefix))


def _sdk_many_once(server: ServerProcess, n: int, prefix: str, watchers: int) -> float:
    """The push with ``watchers`` wildcard watches, each fed through an ``on_event`` callback."""
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from xds_client import ResourceUpdated, XdsClient

    counts = [0] * watchers
    done = threading.Event()
    lock = threading.Lock()
    finished = [0]

    def counter(index: int) -> Callable[[object], None]:
        def on_event(event: object) -> None:
            if isinstance(event, ResourceUpdated):
                event.resource  # noqa: B018 - the message, as raw has it
                counts[index] += 1
                if counts[index] == n:
                    with lock:
                        finished[0] += 1
                        if finished[0] == watchers:
                            done.set()

        return on_event

    server.call("reset")
    with XdsClient(server.address, node=node(), does_not_exist_timeout=None) as client:
        watches = [client.watch(Cluster, on_event=counter(i)) for i in range(watchers)]
        server.call("wait_streams", "sotw", 1, 30.0)
        start = time.perf_counter()
        server.post("send", "sotw", f"{prefix}_full")
        if not done.wait(_TIMEOUT):
            raise TimeoutError(f"watchers got {counts} of {n}")
        elapsed = time.perf_counter() - start
        server.reply()
        for watch in watches:
            watch.close()
    return elapsed


def _raw_once(server: ServerProcess, n: int, prefix: str) -> tuple[float, float]:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest

    server.call("reset")
    stream = RawStream(server.address, delta=False)
    try:
        stream.send(DiscoveryRequest(node=node(), type_url=CDS))
        server.call("wait_streams", "sotw", 1, 30.0)
        cache: dict[str, Any] = {}
        times = []
        for name in (f"{prefix}_full", f"{prefix}_changed"):
            start = time.perf_counter()
            server.post("send", "sotw", name)
            response = stream.recv()
            for packed in response.resources:
                cluster = Cluster.FromString(packed.value)
                cache[cluster.name] = cluster
            stream.send(
                DiscoveryRequest(
                    type_url=CDS, version_info=response.version_info, response_nonce=response.nonce
                )
            )
            times.append(time.perf_counter() - start)
            server.reply()
            del response
        assert len(cache) == n
    finally:
        stream.close()
    return times[0], times[1]


def _rows(n: int, k: int, raw: list[tuple[float, float]], sdk: dict[str, list[Any]]) -> list[Row]:
    rows = []
    for index, (scenario, target, limit) in enumerate(
        [
            (f"SotW push of {n:,} new clusters", "<= 1.2x raw", 1.2),
            (f"SotW re-push of {n:,}, {k:,} changed", "<= 0.2x raw full decode", 0.2),
        ]
    ):
        r = [t[index] * 1000 for t in raw]
        for client, runs in sdk.items():
            s = [t[index] * 1000 for t in runs]
            rows.append(
                Row(
                    scenario, f"{client}: until the watcher has every update", "ms",
                    median(s), median(r), target=target, check=ratio_at_most(limit),
                    samples_sdk=s, samples_raw=r,
                )
            )  # fmt: skip
    return rows


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    rows: list[Row] = []
    for n, prefix in ((cfg.sotw_clusters, "sotw"), (cfg.sotw_large, "sotw_large")):
        k = max(1, n // 100)  # 1% changed
        server.call("prepare_sotw", n, k, prefix)
        raw: list[tuple[float, float]] = []
        sdk: dict[str, list[tuple[float, float]]] = {"XdsClient": [], "AsyncXdsClient": []}
        many: list[float] = []
        for _ in range(cfg.reps):
            raw.append(_raw_once(server, n, prefix))
            sdk["XdsClient"].append(_sdk_once(server, n, k, prefix))
            sdk["AsyncXdsClient"].append(_aio_once(server, n, k, prefix))
            if n == cfg.sotw_clusters:
                many.append(_sdk_many_once(server, n, prefix, _WATCHERS) * 1000)
        block = _rows(n, k, raw, sdk)
        if many:
            block.insert(
                2,
                Row(
                    f"SotW push of {n:,} new clusters",
                    f"XdsClient: {_WATCHERS} watchers (on_event callbacks)", "ms", median(many),
                    block[0].raw, target="measured", samples_sdk=many,
                    note=f"each resource is decoded once and the same message object reaches "
                    f"all {_WATCHERS} watchers; the raw column is the single-dict loop",
                ),
            )  # fmt: skip
        rows += block
        server.call("forget", prefix)
    return rows
