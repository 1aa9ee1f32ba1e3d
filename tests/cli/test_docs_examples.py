"""The README and the quickstart: what a new user reads first.

tests/test_docs_blocks.py runs every block as written; this checks the promises around
them: six lines, a server named before the example, asyncio snippets that are whole
programs (a top-level ``async with`` is a SyntaxError in a script).
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def test_readme_example_is_six_lines_after_a_named_server() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    sync_code = python_blocks(ROOT / "README.md")[0]
    assert len(sync_code.strip().splitlines()) <= 6
    before = text[: text.index(sync_code)]
    assert "xds-client serve --resources docs/examples/resources.yaml --port 18000" in before
    # The example watches what that file serves.
    assert '"backend"' in sync_code
    assert "name: backend" in (ROOT / "docs/examples/resources.yaml").read_text()


@pytest.mark.parametrize("page", ["README.md", "docs/quickstart.md"])
def test_every_python_block_is_a_whole_program(page: str) -> None:
    for code in python_blocks(ROOT / page):
        tree = ast.parse(code)  # SyntaxError for a top-level `async with`
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        imported = {
            (alias.asname or alias.name).split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        defined = {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        } | {
            n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        missing = names - imported - defined - set(dir(builtins))
        assert not missing, f"{page}: a block uses {sorted(missing)} without defining them"


def test_asyncio_snippets_run_their_coroutine() -> None:
    for page in ("README.md", "docs/quickstart.md"):
        async_blocks = [c for c in python_blocks(ROOT / page) if "async " in c]
        assert async_blocks, page
        for code in async_blocks:
            assert "asyncio.run(main())" in code, page
