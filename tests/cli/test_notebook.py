"""docs/examples/explore.ipynb runs top to bottom in a real Jupyter kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import ipykernel  # noqa: F401 - hard imports: a missing kernel must fail the test, not skip it
import nbclient
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "examples" / "explore.ipynb"


# Older jupyter_core warns about its own path migration (JUPYTER_PLATFORM_DIRS opts in).
@pytest.mark.filterwarnings("ignore:Jupyter is migrating its paths:DeprecationWarning")
@pytest.mark.timeout(120)
def test_notebook_executes_without_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    notebook = cast("Any", nbformat).read(NOTEBOOK, as_version=4)  # nbformat.read is untyped
    # "python3" is ipykernel's own kernel; jupyter_client starts it with sys.executable,
    # so the kernel runs in this virtualenv, with this checkout of xds_client.
    client = nbclient.NotebookClient(
        notebook,
        timeout=60,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell

    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = "\n".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "<table>" in html
    assert "<td>canary</td>" in html  # the cache shows itself: the added cluster
    text = "\n".join(o.get("text", "") for o in outputs)
    assert "reason='deleted'" in text  # the watch saw the removal
    assert "<pre>" in html  # a stored object shows its JSON
    assert "<td>latency</td>" in html  # the store listed the dashboards
    assert "config graph of listener ingress" in html  # watch_config's snapshot drew itself
    assert 'stroke="#dc2626"' in html  # ... and the deleted cluster in red
    texts = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "serving version 1 on 127.0.0.1:" in texts


def _gen_notebook() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gen_notebook", ROOT / "tools" / "gen_notebook.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.filterwarnings("ignore:Jupyter is migrating its paths:DeprecationWarning")
@pytest.mark.timeout(120)
def test_committed_outputs_are_current(monkeypatch: pytest.MonkeyPatch) -> None:
    # The notebook is read on code hosts with its outputs: they must be there and current.
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    tool = _gen_notebook()
    committed = cast("Any", nbformat).read(NOTEBOOK, as_version=4)
    outputs = tool.outputs_of(committed)
    assert sum(bool(o) for o in outputs) >= 8, "outputs missing: run tools/gen_notebook.py"
    assert outputs == tool.outputs_of(tool.execute()), "stale outputs: run tools/gen_notebook.py"
