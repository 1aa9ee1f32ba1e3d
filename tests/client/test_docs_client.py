"""Run every ```python block of docs/client.md, in order, in one namespace."""

from __future__ import annotations

import contextlib
import re
import threading
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks() -> list[str]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def test_docs_have_examples() -> None:
    assert len(blocks()) >= 8


@pytest.mark.timeout(60)
def test_docs_client_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, object] = {"__name__": "docs_client"}
    baseline = {t.ident for t in threading.enumerate()}
    try:
        for i, source in enumerate(blocks()):
            code = compile(source, f"{DOC.name}[block {i}]", "exec")
            exec(code, namespace)
    finally:
        cp = namespace.get("cp")
        close = getattr(cp, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()
    out = capsys.readouterr().out
    assert "a 1 a" in out  # the first example printed its update
    assert "async a" in out
    assert "connect_timeout over 10s" in out
    assert "back on" in out
    leftover = [
        t
        for t in threading.enumerate()
        if t.ident not in baseline and t.name.startswith("xds-client")
    ]
    assert not leftover
