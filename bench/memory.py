"""RSS per cached Cluster, and reconnecting while holding them all (delta).

Each client runs in a fresh subprocess (``python -m bench.memory MODE ADDRESS N``)
so its RSS is its own: RSS is read once the stream is up and again once all N
clusters are cached (after a GC), and the difference is divided by N. The
server then drops the stream, and the time from the drop to the arrival of
the reconnected stream's first request (with N ``initial_resource_versions``)
is measured by the server.

Modes: ``sdk`` (XdsClient, one wildcard watch), ``lean`` (the same with
``lazy_decode=True``: bytes kept, decoded on access), ``aio`` and ``aio_lean``
(the same with AsyncXdsClient), ``raw`` (generated stub,
``Cluster.FromString`` into a dict of messages, and for delta the versions for
the reconnect). Each mode runs fed by delta (responses of 1,000) and by SotW (one
response of all N); the reconnect is measured on delta.
"""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
import time
from typing import Any, Literal

from bench._clients import RawStream, node
from bench._data import CDS
from bench._harness import Config, Row, median, ratio_at_most, rss_bytes, sdk_below
from bench._server import ServerProcess

SCENARIO = "memory"
ORDER = 30

_TIMEOUT = 120.0


def _say(*parts: object) -> None:
    print(*parts, flush=True)


def _settled_rss() -> int:
    gc.collect()
    time.sleep(0.2)
    gc.collect()
    return rss_bytes()


def _child_sdk(address: str, n: int, lean: bool, protocol: Literal["sotw", "delta"]) -> None:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from xds_client import ResourceUpdated, XdsClient

    options: dict[str, Any] = {"lazy_decode": True} if lean else {}
    with XdsClient(
        address, node=node(), protocol=protocol, does_not_exist_timeout=None, **options
    ) as client:
        watch = client.watch(Cluster)
        time.sleep(0.3)
        _say("ready", _settled_rss())
        seen = 0
        while seen < n:
            event = watch.get(timeout=_TIMEOUT)
            if isinstance(event, ResourceUpdated):
                event.resource  # noqa: B018 - lean mode decodes it here, as raw did
                seen += 1
        _say("cached", _settled_rss(), len(client.resources(Cluster)))
        sys.stdin.readline()  # the parent drops the stream meanwhile; the client reconnects


def _child_aio(address: str, n: int, lean: bool, protocol: Literal["sotw", "delta"]) -> None:
    import asyncio

    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from xds_client import AsyncXdsClient, ResourceUpdated

    options: dict[str, Any] = {"lazy_decode": True} if lean else {}

    async def main() -> None:
        async with AsyncXdsClient(
            address, node=node(), protocol=protocol, does_not_exist_timeout=None, **options
        ) as client:
            watch = client.watch(Cluster)
            await asyncio.sleep(0.3)
            _say("ready", _settled_rss())
            seen = 0
            while seen < n:
                event = await watch.get(timeout=_TIMEOUT)
                if isinstance(event, ResourceUpdated):
                    event.resource  # noqa: B018 - lean mode decodes it here, as raw did
                    seen += 1
            _say("cached", _settled_rss(), len(client.resources(Cluster)))
            await asyncio.to_thread(sys.stdin.readline)  # the client reconnects meanwhile

    asyncio.run(main())


def _child_raw_sotw(address: str, n: int) -> None:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest

    stream = RawStream(address, delta=False)
    stream.send(DiscoveryRequest(node=node(), type_url=CDS))
    time.sleep(0.3)
    _say("ready", _settled_rss())
    cache: dict[str, Any] = {}
    response = stream.recv()
    for packed in response.resources:
        cluster = Cluster.FromString(packed.value)
        cache[cluster.name] = cluster
    stream.send(
        DiscoveryRequest(
            type_url=CDS, version_info=response.version_info, response_nonce=response.nonce
        )
    )
    del response, packed
    _say("cached", _settled_rss(), len(cache))
    sys.stdin.readline()
    stream.close()


def _child_raw(address: str, n: int) -> None:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryRequest

    stream = RawStream(address, delta=True)
    stream.send(DeltaDiscoveryRequest(node=node(), type_url=CDS, resource_names_subscribe=["*"]))
    time.sleep(0.3)
    _say("ready", _settled_rss())
    cache: dict[str, Any] = {}
    versions: dict[str, str] = {}
    while len(cache) < n:
        response = stream.recv()
        for resource in response.resources:
            cache[resource.name] = Cluster.FromString(resource.resource.value)
            versions[resource.name] = resource.version
        stream.send(DeltaDiscoveryRequest(type_url=CDS, response_nonce=response.nonce))
        del response
    _say("cached", _settled_rss(), len(cache))
    with contextlib.suppress(Exception):
        stream.recv()
    stream.close()
    stream = RawStream(address, delta=True)
    request = DeltaDiscoveryRequest(node=node(), type_url=CDS, resource_names_subscribe=["*"])
    request.initial_resource_versions.update(versions)
    stream.send(request)
    sys.stdin.readline()
    stream.close()


def _start_child(server: ServerProcess, mode: str, feed: str, n: int) -> Any:
    server.call("reset")
    return subprocess.Popen(
        [sys.executable, "-m", "bench.memory", mode, feed, server.address, str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _cached_per_resource(server: ServerProcess, proc: Any, mode: str, feed: str, n: int) -> float:
    ready = proc.stdout.readline().split()
    if not ready or ready[0] != "ready":
        raise RuntimeError(f"bench.memory {mode} {feed}: no ready line")
    server.call("wait_streams", feed, 1, 60.0)
    server.call("send", feed, "bulk" if feed == "delta" else "rss_full")
    cached = proc.stdout.readline().split()
    if not cached or cached[0] != "cached" or int(cached[2]) != n:
        raise RuntimeError(f"bench.memory {mode} {feed}: got {cached!r}")
    return (int(cached[1]) - int(ready[1])) / n


def _stop_child(proc: Any) -> None:
    try:
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _run_child(server: ServerProcess, mode: str, n: int) -> tuple[float, float]:
    """Delta: (RSS bytes per cached cluster, ms from drop to the new stream's first request)."""
    proc = _start_child(server, mode, "delta", n)
    try:
        per = _cached_per_resource(server, proc, mode, "delta", n)
        dropped_at: float = server.call("abort", "delta")
        info = server.call("wait_streams", "delta", 2, 60.0)
        if info["first_versions"] != n:
            raise RuntimeError(f"{mode}: reconnect sent {info['first_versions']} versions")
        reconnect_ms = (info["first_at"] - dropped_at) * 1000
    finally:
        _stop_child(proc)
    return per, reconnect_ms


def _run_sotw_child(server: ServerProcess, mode: str, n: int) -> float:
    """SotW: RSS bytes per cached cluster."""
    proc = _start_child(server, mode, "sotw", n)
    try:
        return _cached_per_resource(server, proc, mode, "sotw", n)
    finally:
        _stop_child(proc)


def _build_request_ms(n: int) -> tuple[float, float]:
    """(SDK, raw) ms to build and serialize the first request of a reconnected stream."""
    from envoy.service.discovery.v3.discovery_pb2 import (
        DeltaDiscoveryRequest,
        DeltaDiscoveryResponse,
    )

    from bench._data import cluster_name, make_cluster
    from xds_client.protocol import DeltaProtocol, ProtocolConfig

    raw = make_cluster(0).SerializeToString()
    response = DeltaDiscoveryResponse(type_url=CDS, nonce="1")
    for i in range(n):
        res = response.resources.add(name=cluster_name(i), version="1")
        res.resource.type_url = CDS
        res.resource.value = raw  # the same bytes are fine: delta names them
    protocol = DeltaProtocol(ProtocolConfig(node=node(), does_not_exist_timeout=None))
    protocol.subscribe(CDS, None)
    protocol.connected(0.0)
    protocol.requests_to_send()
    protocol.receive(response, 1.0)
    protocol.disconnected(2.0)
    protocol.connected(3.0)
    start = time.perf_counter()
    requests = protocol.requests_to_send()
    for request in requests:
        request.SerializeToString()
    sdk = (time.perf_counter() - start) * 1000
    versions = {cluster_name(i): "1" for i in range(n)}
    start = time.perf_counter()
    request = DeltaDiscoveryRequest(node=node(), type_url=CDS, resource_names_subscribe=["*"])
    request.initial_resource_versions.update(versions)
    request.SerializeToString()
    return sdk, (time.perf_counter() - start) * 1000


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    n = cfg.rss_clusters
    server.call("prepare_bulk", n, 1000)
    server.call("prepare_sotw", n, 0, "rss")
    modes = ("raw", "sdk", "lean", "aio", "aio_lean")
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    sotw: dict[str, list[float]] = {mode: [] for mode in modes}
    reps = max(1, min(cfg.reps, 3))  # each run caches 100,000 clusters in a new process
    for _ in range(reps):
        for mode in modes:
            results[mode].append(_run_child(server, mode, n))
            sotw[mode].append(_run_sotw_child(server, mode, n))
    server.call("forget", "rss")
    server.call("forget", "bulk")
    builds = [_build_request_ms(cfg.reconnect_resources) for _ in range(reps)]
    delta = {mode: [r[0] for r in runs] for mode, runs in results.items()}
    rec = {mode: [r[1] for r in runs] for mode, runs in results.items()}
    rows = []
    for feed, rss in (("SotW-fed", sotw), ("delta-fed", delta)):
        scenario = f"RSS per cached Cluster, {n:,} cached, {feed}"
        for decoded, lean, client in (
            ("sdk", "lean", "XdsClient"),
            ("aio", "aio_lean", "AsyncXdsClient"),
        ):
            rows += [
                Row(
                    scenario, f"{client} (decoded)", "B", median(rss[decoded]), median(rss["raw"]),
                    target="<= 1.15x raw dict of messages", check=ratio_at_most(1.15),
                    samples_sdk=rss[decoded], samples_raw=rss["raw"],
                ),
                Row(
                    scenario, f"{client}(lazy_decode=True)", "B", median(rss[lean]),
                    median(rss["raw"]), target="<= 0.5x raw dict of messages",
                    check=ratio_at_most(0.5), samples_sdk=rss[lean], samples_raw=rss["raw"],
                ),
            ]  # fmt: skip
    return [
        *rows,
        Row(
            f"reconnect holding {n:,} delta resources", "drop -> first request at the server",
            "ms", median(rec["sdk"]), median(rec["raw"]), target="measured",
            samples_sdk=rec["sdk"], samples_raw=rec["raw"],
            note="includes the server's parse of the 2 MB request; the target applies to "
            "the client's part, on the next line",
        ),
        Row(
            f"reconnect holding {cfg.reconnect_resources:,} delta resources",
            "build + serialize the first request", "ms",
            median([b[0] for b in builds]), median([b[1] for b in builds]), target="< 100 ms",
            check=sdk_below(100.0),
        ),
    ]  # fmt: skip


if __name__ == "__main__":
    mode, feed, address, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if mode == "raw":
        (_child_raw if feed == "delta" else _child_raw_sotw)(address, count)
    else:
        child = _child_aio if mode.startswith("aio") else _child_sdk
        child(
            address,
            count,
            lean=mode.endswith("lean"),
            protocol="delta" if feed == "delta" else "sotw",
        )
