"""SotW: a push of N new clusters, then a re-push of the same N with a few changed.

SDK: ``XdsClient`` with one wildcard ``watch(Cluster)`` read on the main thread;
the clock stops when the watcher has every update. Raw: the generated ADS stub,
``Cluster.FromString`` of every resource into a dict, then the ACK.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bench._clients import RawStream, node
from bench._data import CDS
from bench._harness import Config, Row, median, ratio_at_most
from bench._server import ServerProcess

_TIMEOUT = 120.0
_WATCHERS = 10


def _sdk_once(server: ServerProcess, cfg: Config) -> tuple[float, float]:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from xds_client import ResourceUpdated, XdsClient

    server.call("reset")
    with XdsClient(server.address, node=node(), does_not_exist_timeout=None) as client:
        watch = client.watch(Cluster)
        server.call("wait_streams", "sotw", 1, 30.0)
        times = []
        for name, expect in (("sotw_full", cfg.sotw_clusters), ("sotw_changed", cfg.sotw_changed)):
            start = time.perf_counter()
            server.post("send", "sotw", name)
            got = 0
            while got < expect:
                if isinstance(watch.get(timeout=_TIMEOUT), ResourceUpdated):
                    got += 1
            times.append(time.perf_counter() - start)
            server.reply()
        watch.close()
    return times[0], times[1]


def _sdk_many_once(server: ServerProcess, cfg: Config, watchers: int) -> float:
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
                counts[index] += 1
                if counts[index] == cfg.sotw_clusters:
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
        server.post("send", "sotw", "sotw_full")
        if not done.wait(_TIMEOUT):
            raise TimeoutError(f"watchers got {counts} of {cfg.sotw_clusters}")
        elapsed = time.perf_counter() - start
        server.reply()
        for watch in watches:
            watch.close()
    return elapsed


def _raw_once(server: ServerProcess, cfg: Config) -> tuple[float, float]:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest

    server.call("reset")
    stream = RawStream(server.address, delta=False)
    try:
        stream.send(DiscoveryRequest(node=node(), type_url=CDS))
        server.call("wait_streams", "sotw", 1, 30.0)
        cache: dict[str, Any] = {}
        times = []
        for name in ("sotw_full", "sotw_changed"):
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
        assert len(cache) == cfg.sotw_clusters
    finally:
        stream.close()
    return times[0], times[1]


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    server.call("prepare_sotw", cfg.sotw_clusters, cfg.sotw_changed)
    sdk: list[tuple[float, float]] = []
    raw: list[tuple[float, float]] = []
    many: list[float] = []
    for _ in range(cfg.reps):
        raw.append(_raw_once(server, cfg))
        sdk.append(_sdk_once(server, cfg))
        many.append(_sdk_many_once(server, cfg, _WATCHERS) * 1000)
    n, k = cfg.sotw_clusters, cfg.sotw_changed
    rows = []
    for index, (scenario, target, limit) in enumerate(
        [
            (f"SotW push of {n:,} new clusters", "<= 1.2x raw", 1.2),
            (f"SotW re-push of {n:,}, {k} changed", "<= 0.35x raw full decode", 0.35),
        ]
    ):
        s = [t[index] * 1000 for t in sdk]
        r = [t[index] * 1000 for t in raw]
        rows.append(
            Row(
                scenario, "until the watcher has every update", "ms", median(s), median(r),
                target=target, check=ratio_at_most(limit), samples_sdk=s, samples_raw=r,
            )
        )  # fmt: skip
    rows.insert(
        1,
        Row(
            f"SotW push of {n:,} new clusters", f"{_WATCHERS} watchers (on_event callbacks)",
            "ms", median(many), rows[0].raw, target="measured", samples_sdk=many,
            note=f"each resource is decoded once and the same message object reaches all "
            f"{_WATCHERS} watchers; the raw column is the single-dict loop",
        ),
    )  # fmt: skip
    return rows
