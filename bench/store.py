"""ResourceStore: list N items in pages, and watch M events, SDK against the raw stub.

The SQLite ``ResourceStoreServer`` runs in the server process. SDK:
``ResourceStoreClient.list(prefix, limit=500)`` and ``watch(prefix, since=rv)``.
Raw: the generated ``ResourceStoreStub``: ``List`` page by page following
``next_page_token``, and ``Watch`` from the same version, collecting
``(resource_version, value)`` per item or event.
"""

from __future__ import annotations

import time
from typing import Any

import grpc

from bench._data import store_prefix
from bench._harness import Config, Row, median, ratio_at_least
from bench._server import ServerProcess

SCENARIO = "store"
ORDER = 40

_NS_LIST = "bench-list"
_NS_WATCH = "bench-watch"


def _sdk_list(address: str, cfg: Config) -> float:
    from xds_client.store import ResourceStoreClient

    with ResourceStoreClient(address) as client:
        client.is_healthy()  # connect before the clock starts
        start = time.perf_counter()
        items = [
            (o.resource_version, o.value)
            for o in client.list(store_prefix(_NS_LIST), limit=cfg.store_page)
        ]
        elapsed = time.perf_counter() - start
    assert len(items) == cfg.store_items, len(items)
    return cfg.store_items / elapsed


def _raw_list(address: str, cfg: Config) -> float:
    from xds_client.store._proto import resource_pb2 as pb
    from xds_client.store._proto import resource_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(address)
    try:
        stub = pb_grpc.ResourceStoreStub(channel)
        pb_grpc.DiagnosticsStub(channel).IsHealthy(pb.HealthCheckRequest())
        key = store_prefix(_NS_LIST).to_proto()
        start = time.perf_counter()
        items: list[tuple[int, bytes]] = []
        token = ""
        while True:
            page = stub.List(
                pb.ListRequest(
                    next_page_token=token, limit=cfg.store_page, options=pb.ListOptions(key=key)
                )
            )
            items.extend((w.resource_version, w.value) for w in page.items)
            token = page.next_page_token
            if not token:
                break
        elapsed = time.perf_counter() - start
    finally:
        channel.close()
    assert len(items) == cfg.store_items, len(items)
    return cfg.store_items / elapsed


def _sdk_watch(address: str, cfg: Config, since: int) -> float:
    from xds_client.store import ResourceStoreClient

    with ResourceStoreClient(address) as client:
        client.is_healthy()
        start = time.perf_counter()
        got: list[tuple[int, bytes | None]] = []
        with client.watch(store_prefix(_NS_WATCH), since=since) as watch:
            for event in watch:
                got.append((event.resource_version, event.value))
                if len(got) == cfg.store_events:
                    break
        elapsed = time.perf_counter() - start
    return cfg.store_events / elapsed


def _raw_watch(address: str, cfg: Config, since: int) -> float:
    from xds_client.store._proto import resource_pb2 as pb
    from xds_client.store._proto import resource_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(address)
    try:
        stub = pb_grpc.ResourceStoreStub(channel)
        pb_grpc.DiagnosticsStub(channel).IsHealthy(pb.HealthCheckRequest())
        key = store_prefix(_NS_WATCH).to_proto()
        start = time.perf_counter()
        got: list[tuple[int, bytes]] = []
        call: Any = stub.Watch(pb.WatchRequest(since=since, options=pb.ListOptions(key=key)))
        for event in call:
            got.append((event.resource.version, event.resource.value))
            if len(got) == cfg.store_events:
                break
        call.cancel()
        elapsed = time.perf_counter() - start
    finally:
        channel.close()
    return cfg.store_events / elapsed


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    address = server.call("store_start")
    server.call("store_load", _NS_LIST, cfg.store_items)
    watched = min(cfg.store_events, 1000)
    server.call("store_load", _NS_WATCH, watched)
    since, _ = server.call("store_modify", _NS_WATCH, watched, cfg.store_events)
    lists: tuple[list[float], list[float]] = ([], [])
    watches: tuple[list[float], list[float]] = ([], [])
    for _ in range(cfg.reps):
        lists[1].append(_raw_list(address, cfg))
        lists[0].append(_sdk_list(address, cfg))
        watches[1].append(_raw_watch(address, cfg, since))
        watches[0].append(_sdk_watch(address, cfg, since))
    return [
        Row(
            f"ResourceStore list of {cfg.store_items:,} (pages of {cfg.store_page})",
            "items/s", "/s", median(lists[0]), median(lists[1]), better="higher",
            target=">= 0.9x raw stub", check=ratio_at_least(0.9),
            samples_sdk=lists[0], samples_raw=lists[1],
        ),
        Row(
            f"ResourceStore watch of {cfg.store_events:,} events", "events/s", "/s",
            median(watches[0]), median(watches[1]), better="higher",
            target=">= 0.9x raw stub", check=ratio_at_least(0.9),
            samples_sdk=watches[0], samples_raw=watches[1],
        ),
    ]  # fmt: skip
