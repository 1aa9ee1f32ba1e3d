"""ResourceStore informer sync of N objects: time, against keeping a plain list.

Peak memory of the same sync is ``bench/store_memory.py``'s row (it resets the peak
before the sync, so the figure is the sync's own). Each side runs in a fresh
subprocess (``python -m bench.informer MODE ADDRESS N``). ``informer``: ``client.informer(prefix)``
started and waited on until synced (every object cached as a ``StoredObject``).
``list``: ``list(client.list(prefix))`` kept in memory, the least a cache can
hold. The objects are the bench's ~450 B dashboards in the SQLite server.
"""

from __future__ import annotations

import subprocess
import sys
import time

from bench._data import store_prefix
from bench._harness import Config, Row, median
from bench._server import ServerProcess

_NS = "bench-informer"


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
    print(elapsed, flush=True)


def _run_child(address: str, mode: str, n: int) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "bench.informer", mode, address, str(n)],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return float(out.stdout.split()[-1])


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    address = server.call("store_start")
    n = cfg.store_items
    server.call("store_load", _NS, n)
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(min(cfg.reps, 3)):
        for side, mode in ((0, "informer"), (1, "list")):
            times[side].append(_run_child(address, mode, n))
    return [
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
