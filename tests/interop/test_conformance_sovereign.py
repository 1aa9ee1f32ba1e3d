"""The conformance checker against sovereign, a REST-JSON control plane (what applies to REST).

The server is the one tests/interop/test_sovereign.py starts (its own venv in .peers).
What sovereign fails is pinned here and explained in docs/conformance.md.
"""

from __future__ import annotations

import pytest

from xds_client.conformance import Options, render_table, run

from .test_sovereign import Sovereign, sovereign

__all__ = ["sovereign"]

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

EXPECTED: dict[str, str] = {}


def test_sovereign_conformance(sovereign: Sovereign) -> None:
    report = run(sovereign.url, options=Options(node_id="edge-1", cluster="edge"))
    print(render_table(report, evidence=False))  # what docs/conformance.md publishes
    not_passed = {r.check.id: r.outcome for r in report.results if r.outcome != "passed"}
    assert not_passed == EXPECTED, render_table(report, only_failures=True, evidence=True)
    assert len(report.results) == 7
