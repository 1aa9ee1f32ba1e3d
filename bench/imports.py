"""Import time: ``python -c "import xds_client"`` against ``import grpc`` plus the ADS stub.

Each import runs in a fresh interpreter, alternating the two, and the wall
time of the whole process is taken (interpreter start included in both).
"""

from __future__ import annotations

import subprocess
import sys
import time

from bench._harness import Config, Row, median, ratio_at_most
from bench._server import ServerProcess

SDK = "import xds_client"
RAW = "import grpc; import envoy.service.discovery.v3.ads_pb2_grpc"


def _time(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return (time.perf_counter() - start) * 1000


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    del server  # nothing to serve
    _time(SDK)  # warm the file cache
    _time(RAW)
    sdk: list[float] = []
    raw: list[float] = []
    for _ in range(cfg.import_reps):
        sdk.append(_time(SDK))
        raw.append(_time(RAW))
    return [
        Row(
            'python -c "import xds_client"', "process wall time", "ms", median(sdk), median(raw),
            target="<= 1.2x import grpc + ADS stub", check=ratio_at_most(1.2),
            samples_sdk=sdk, samples_raw=raw,
        )
    ]  # fmt: skip
