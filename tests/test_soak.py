"""A short fault soak (``make soak`` runs the long one): nothing lost, nothing repeated."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(150)
def test_short_soak_loses_and_repeats_nothing() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "soak.py"), "--faults", "30", "--seed", "7"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert re.fullmatch(r"30 faults, 0 lost, 0 duplicated", last), (
        result.stdout[-2000:] + result.stderr[-2000:]
    )
    assert result.returncode == 0
    # Every kind ran, the new ones included: a response cut mid-frame, a SIGKILLed server.
    faults = re.search(
        r"(\d+) responses cut mid-frame, (\d+) server processes killed", result.stdout
    )
    assert faults is not None, result.stdout[-2000:]
    assert int(faults[1]) >= 1
    assert int(faults[2]) >= 1
