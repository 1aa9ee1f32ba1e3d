"""ResourceStore informer sync of N objects: peak RSS and time, against keeping a plain list.

Each side runs in a fresh subprocess (``python -m bench.informer MODE ADDRESS N``)
so its peak RSS (``VmHWM``) is its own. ``informer``: ``client.informer(prefix)``
started and waited on until synced (every object cached as a ``StoredObject``).
``list``: ``list(client.list(prefix))`` kept in memory, the least a cache can
hold. The objects are the bench's ~450 B dashboards in the SQLite server.
"""

from __future__ import annotations

import subprocess
import sys
import time

from bench._data import store_prefix
from bench._harness import Config, Row, median, ratio_at_most
from bench._server import ServerProcess

_NS = "bench-informer"


def _peak_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(mode: str, address: str, n: int) -> None:
    from xds_client.store import ResourceStoreClient

    with ResourceStoreClient(address) as client:
        client.is_healthy()  # connect (and import) before the clock starts
        start = time.perf_counter()
        if mode == "informer":
            informer = client.informer(store_prefix(_NS)).start()
            informer.wait_synced(600)
            count = len(informer.objects)
            elapsed = time.perf_counter() - start
            informer.stop()
        else:
            kept = list(client.list(store_prefix(_NS)))
            count = len(kept)
            elapsed = time.perf_counter() - start
    assert count == n, count
    print(_peak_rss(), elapsed, flush=True)


def _run_child(address: str, mode: str, n: int) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.informer", mode, address, str(n)],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    rss, elapsed = out.stdout.split()
    return float(rss) / 1e6, float(elapsed)


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    address = server.call("store_start")
    n = cfg.store_items
    server.call("store_load", _NS, n)
    rss: tuple[list[float], list[float]] = ([], [])
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(min(cfg.reps, 3)):
        for side, mode in ((0, "informer"), (1, "list")):
            peak, elapsed = _run_child(address, mode, n)
            rss[side].append(peak)
            times[side].append(elapsed)
    return [
        Row(
            f"ResourceStore informer sync of {n:,} (peak RSS)", "MB", "MB",
            median(rss[0]), median(rss[1]), target="<= 2x a kept list()",
            check=ratio_at_most(2.0), note="raw column: list() kept in memory",
            samples_sdk=rss[0], samples_raw=rss[1],
        ),
        Row(
            f"ResourceStore informer sync of {n:,} (time)", "s", "s",
            median(times[0]), median(times[1]), target="reported",
            note="raw column: list() kept in memory; the informer decodes every "
            "object's JSON to key it (ListResponse items carry no key)",
            samples_sdk=times[0], samples_raw=times[1],
        ),
    ]  # fmt: skip


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], int(sys.argv[3]))
