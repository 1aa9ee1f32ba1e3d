"""Import time, cold interpreter, bytecode cached: the import a user writes against the raw one.

Each import runs in a fresh interpreter, alternating SDK and raw, and the CPU
time (user + system) of the whole process is taken, interpreter start included
in both: on a shared machine the wall time mostly measures the other processes.
Bytecode writing is forced on (``PYTHONDONTWRITEBYTECODE`` removed) and a first
untimed run of each compiles it, so no side pays for compiling sources.
"""

from __future__ import annotations

import os
import subprocess
import sys

from bench._harness import Config, Row, median, ratio_at_most
from bench._server import ServerProcess

SCENARIO = "imports"
ORDER = 90

RAW = "import grpc; import envoy.service.discovery.v3.ads_pb2_grpc"
CASES = (
    # (code, target, limit)
    ("from xds_client import XdsClient, AsyncXdsClient, Node", "<= 1.1x", 1.1),
    ("from xds_client import XdsClient, Node", "measured", None),
    ("import xds_client", "<= 1.2x", 1.2),
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _time(code: str, env: dict[str, str]) -> float:
    """CPU milliseconds of ``python -c code`` (the child's rusage)."""
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, code)
    return (usage.ru_utime + usage.ru_stime) * 1000


def run(server: ServerProcess, cfg: Config) -> list[Row]:
    del server  # nothing to serve
    env = _env()
    for code, _, _ in CASES:
        _time(code, env)  # compile the bytecode, warm the file cache
    _time(RAW, env)
    sdk: dict[str, list[float]] = {code: [] for code, _, _ in CASES}
    raw: list[float] = []
    for _ in range(cfg.import_reps):
        for code, _, _ in CASES:
            sdk[code].append(_time(code, env))
            raw.append(_time(RAW, env))
    rows = []
    for code, target, limit in CASES:
        rows.append(
            Row(
                f'python -c "{code}"', "cold process CPU, bytecode cached", "ms",
                median(sdk[code]), median(raw),
                target=f"{target} import grpc + ADS stub" if limit else target,
                check=ratio_at_most(limit) if limit else None,
                samples_sdk=sdk[code], samples_raw=raw,
            )
        )  # fmt: skip
    return rows
