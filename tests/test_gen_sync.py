"""The thread twins are generated from the asyncio modules and must be current.

After changing an asyncio driver module: ``python tools/gen_sync.py``.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_sync", ROOT / "tools" / "gen_sync.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    sys.path.insert(0, str(ROOT / "tools"))  # the tools share tools/_ruff.py
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return module


def test_generated_twins_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert _tool().main(["--check"]) == 0, capsys.readouterr().err


def test_check_fails_on_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = _tool()
    twin = tool.FILES[0]
    stale = tmp_path / "stale.py"
    stale.write_text((ROOT / twin.target).read_text() + "# edited by hand\n")
    monkeypatch.setattr(tool, "ROOT", ROOT)
    edited = tool.Twin(twin.source, str(stale), twin.doc, twin.rules)
    monkeypatch.setattr(tool, "FILES", (edited, *tool.FILES[1:]))
    assert tool.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err


def test_check_fails_on_an_unused_substitution(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = _tool()
    monkeypatch.setattr(tool, "COMMON", (*tool.COMMON, (r"\bnever_written\b", "x")))
    assert tool.main(["--check"]) == 1
    assert "never_written" in capsys.readouterr().err


def test_generated_files_say_so() -> None:
    tool = _tool()
    for twin in (*tool.FILES, *tool.TESTS):
        first = (ROOT / twin.target).read_text().splitlines()[0]
        assert first.startswith("# Generated from ")
        assert "do not edit" in first


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_thread_side_imports_no_asyncio() -> None:
    # grpc itself loads asyncio (for grpc.aio), so this is checked per module, not at run time.
    tool = _tool()
    sync_modules = [ROOT / "src/xds_client/_backends/threads.py"]
    sync_modules += [ROOT / twin.target for twin in tool.FILES]
    for path in sync_modules:
        bad = {n for n in _imports(path) if n.split(".")[0] == "asyncio"}
        bad |= {n for n in _imports(path) if n.endswith("_backends.asyncio")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_sync_xds_and_store_client_paths_load_no_tenacity() -> None:
    # One Backoff computes every delay; tenacity is only for a user's own strategy.
    import subprocess

    code = (
        "import sys\n"
        "from xds_client import Node, XdsClient\n"
        "from xds_client.store import ResourceKey, ResourceStoreClient, RetryPolicy\n"
        "client = XdsClient('127.0.0.1:1', node=Node(id='n'))\n"
        "client.watch('cds', 'x')\n"
        "client.close()\n"
        "retry = RetryPolicy(max_attempts=2, initial_backoff=0.01)\n"
        "with ResourceStoreClient('127.0.0.1:1', timeout=1, retry=retry) as store:\n"
        "    assert not store.is_healthy()\n"
        "    store.informer(ResourceKey('g', 'r', 'ns'))\n"
        "print('tenacity' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False", result.stderr
