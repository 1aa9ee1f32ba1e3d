"""Fixtures of the command-line tests: a served resource file and a helper to run main()."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from xds_client.cli import main
from xds_client.testing import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RESOURCES = ROOT / "docs" / "examples" / "resources.yaml"


@dataclass
class Result:
    """What one main() call returned and printed."""

    code: int
    out: str
    err: str

    def json_lines(self) -> list[dict[str, Any]]:
        """stdout parsed line by line (every line must be one JSON object)."""
        records = [json.loads(line) for line in self.out.splitlines()]
        assert all(isinstance(r, dict) for r in records)
        return records


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    """Call ``cli(*args)`` to run ``main(args)`` in-process and get a :class:`Result`."""

    def run(*args: str) -> Result:
        capsys.readouterr()  # drop anything printed before
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def served() -> Iterator[ControlPlane]:
    """A control plane serving docs/examples/resources.yaml (version "1")."""
    with ControlPlane() as cp:
        cp.load_file(EXAMPLE_RESOURCES)
        yield cp
