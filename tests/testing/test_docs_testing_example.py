"""The pytest example in docs/testing.md runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


@pytest.mark.timeout(120)
def test_first_example_passes(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    example = blocks[0]
    assert len(example.strip().splitlines()) <= 10
    test_file = tmp_path / "test_doc_example.py"
    test_file.write_text(example)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


@pytest.mark.timeout(120)
def test_connected_client_recipe_passes(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    (recipe,) = [b for b in blocks if "xds_async_client" in b]
    test_file = tmp_path / "test_doc_recipe.py"
    test_file.write_text(recipe)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout  # the sync test runs over SotW and over delta
    # The recipe type-checks as users would write it.
    from mypy import api

    out, err, status = api.run(["--strict", "--no-incremental", str(test_file)])
    assert status == 0, out + err
