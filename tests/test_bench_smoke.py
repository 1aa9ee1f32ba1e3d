"""``python -m bench --smoke`` runs every scenario (it checks they run, not how fast)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIO_LINES = (
    "SotW push of",
    "SotW re-push of",
    "delta lockstep",
    "delta firehose",
    "AsyncXdsClient:",
    "SotW-fed",
    "delta-fed",
    "lazy_decode=True",
    "reconnect holding",
    "ResourceStore list of",
    "ResourceStore watch of",
    "informer sync of",
    "watch_config, ",  # issue #31: first full config and convergence, graph vs raw watches
    # issue #18: each target with both clients where both exist
    "AsyncXdsClient (decoded)",
    "AsyncXdsClient(lazy_decode=True)",
    "AsyncInformer: peak RSS",
    'python -c "from xds_client import XdsClient, AsyncXdsClient, Node"',
    'python -c "import xds_client"',
    # issue #34: simulated clients
    "ControlPlane: 10 Envoy-like clients",
)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_bench_smoke_runs_every_scenario() -> None:
    if not (ROOT / "bench" / "__main__.py").exists():
        pytest.skip("bench/ is not part of this installation")
    docs = ROOT / "docs" / "performance.md"
    before = docs.read_bytes() if docs.exists() else None
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    table = result.stdout
    assert "| scenario | metric | SDK | raw | SDK/raw | target | met |" in table
    for line in SCENARIO_LINES:
        assert line in table, f"{line!r} missing from:\n{table}"
    assert "protobuf:" in table
    assert "backend" in table
    # The smoke run never rewrites the published results.
    assert (docs.read_bytes() if docs.exists() else None) == before
