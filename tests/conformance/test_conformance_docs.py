"""docs/conformance.md lists every check with its level, and nothing that is not one."""

from __future__ import annotations

import re
from pathlib import Path

from xds_client.conformance import checks

DOC = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"


def test_the_table_of_checks_is_complete_and_true() -> None:
    rows = re.findall(r"^\| `([a-z-]+)` \| (MUST|SHOULD) \|", DOC.read_text(), re.M)
    assert sorted(rows) == sorted((c.id, c.level) for c in checks())
