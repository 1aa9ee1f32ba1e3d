"""ResourceStore informer: peak RSS of syncing N objects, against keeping ``list()`` of them.

Each client runs in a fresh subprocess (``python -m bench.store_memory MODE ADDRESS N``)
so its peak RSS is its own: the peak is reset before the sync (Linux ``clear_refs``)
and the RSS at that moment is subtracted from the peak once the N objects are held.
``informer``: ``client.informer(prefix)`` until ``wait_synced()``.
``aio_informer``: the same with ``AsyncResourceStoreClient`` (an ``AsyncInformer``).
``list``: ``list(client.list(prefix))`` kept in a variable (the raw of both).
"""

from __future__ import annotations

import gc
import resource
import subprocess
import sys

from bench._data import store_prefix
from bench._harness import Config, Row, median, ratio_at_most
from bench._server import ServerProcess

SCENARIO = "store_memory"
ORDER = 45

_NS = "bench-informer"
_TIMEOUT = 600.0


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # kB
    raise LookupError(field)


def _reset_peak() -> int:
    """Reset the peak RSS (Linux: clear_refs 5) and return the current RSS."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # not permitted: the peak then includes the imports
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return _status("VmRSS")


def _peak() -> int:
    try:
        return _status("VmHWM")
    except (OSError, LookupError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _child(mode: str, address: str, n: int) -> None:
    from xds_client.store import ResourceStoreClient

    with ResourceStoreClient(address) as client:
        client.is_healthy()
        before = _reset_peak()
        if mode == "informer":
            informer = client.informer(store_prefix(_NS)).start()
            informer.wait_synced(_TIMEOUT)
            count = len(informer.objects)
            after = _peak()
            informer.stop()
        else:
            objects = list(client.list(store_prefix(_NS)))
            count = len(objects)
            after = _peak()
    if count != n:
        raise SystemExit(f"{mode}: {count} objects, expected {n}")
    print(after - before, flush=True)


def _child_aio(address: str, n: int) -> None:
    import asyncio

    from xds_client.store import AsyncResourceStoreClient

    async def main() -> tuple[int, int]:
        async with AsyncResourceStoreClient(address) as client:
            await client.is_healthy()
            before = _reset_peak()
            informer = client.informer(store_prefix(_NS)).start()
            await informer.wait_synced(_TIMEOUT)
            count = len(informer.objects)
            after = _peak()
            await informer.stop()
        if count != n:
            raise SystemExit(f"aio_informer: {count} objects, expected {n}")
        return before, after

    before, after = asyncio.run(main())
    print(after - before, flush=True)


def _run_child(address: str, mode: str, n: int) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "bench.store_memory", mode, address, str(n)],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=True,
    )
    return float(out.stdout.split()[-1]) / n


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    n = cfg.informer_items
    address = str(server.call("store_start"))
    server.call("store_load", _NS, n)
    peaks: dict[str, list[float]] = {"informer": [], "aio_informer": [], "list": []}
    for _ in range(max(1, min(cfg.reps, 3))):
        for mode in ("list", "informer", "aio_informer"):
            peaks[mode].append(_run_child(address, mode, n))
    return [
        Row(
            f"ResourceStore informer sync of {n:,} objects",
            f"{metric}: peak RSS growth per object", "B",
            median(peaks[mode]), median(peaks["list"]),
            target="<= 1.2x keeping a plain list()", check=ratio_at_most(1.2),
            samples_sdk=peaks[mode], samples_raw=peaks["list"],
        )
        for mode, metric in (("informer", "Informer"), ("aio_informer", "AsyncInformer"))
    ]  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1] == "aio_informer":
        _child_aio(sys.argv[2], int(sys.argv[3]))
    else:
        _child(sys.argv[1], sys.argv[2], int(sys.argv[3]))
