"""The examples of docs/store.md run, in order, as one script."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "store.md"


@pytest.mark.timeout(60)
def test_guide_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 8
    namespace: dict[str, object] = {"__name__": "store_guide"}
    try:
        for block in blocks:
            exec(compile(block, str(GUIDE), "exec"), namespace)
    finally:
        server = namespace.get("server")
        stop = getattr(server, "stop", None)
        if stop is not None:
            stop()
