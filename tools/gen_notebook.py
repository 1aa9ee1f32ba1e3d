"""Run docs/examples/explore.ipynb and commit it with its outputs (``--check``: fail if stale).

The notebook is shown on code hosts with its outputs, so the committed file holds
them. Ports, durations and execution counts change from run to run: outputs are
compared after ``normalize()`` (ports become ``PORT`` and UIDs ``UUID``; nothing else
is touched).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "docs" / "examples" / "explore.ipynb"
_PORT = re.compile(r"(127\.0\.0\.1|localhost|\[::1\]):\d+")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def execute(path: Path = NOTEBOOK) -> Any:
    """The notebook at ``path``, executed in a fresh kernel of this interpreter."""
    import nbclient
    import nbformat

    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    notebook = cast("Any", nbformat).read(path, as_version=4)
    nbclient.NotebookClient(
        notebook,
        timeout=60,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    for cell in notebook.cells:
        # Run-specific metadata (timings) would make every run a diff.
        cell.metadata.pop("execution", None)
    notebook.metadata.pop("widgets", None)
    return notebook


def normalize(text: str) -> str:
    """Outputs without what changes from run to run: ports and the store's object UIDs."""
    return _UUID.sub("UUID", _PORT.sub(r"\1:PORT", text))


def outputs_of(notebook: Any) -> list[Any]:
    """Each code cell's outputs, normalized, as JSON-ready data."""
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    return [json.loads(normalize(json.dumps(c.get("outputs", [])))) for c in cells]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the outputs are stale")
    args = parser.parse_args(argv)
    import nbformat

    fresh = execute()
    if args.check:
        # nbformat joins the multi-line strings that the file stores as lists.
        committed = cast("Any", nbformat).read(NOTEBOOK, as_version=4)
        if outputs_of(committed) != outputs_of(fresh):
            print(f"{NOTEBOOK.relative_to(ROOT)} has stale outputs: run tools/gen_notebook.py")
            return 1
        return 0
    for cell in fresh.cells:
        if cell.cell_type == "code":
            for output in cell.outputs:
                if "text" in output:
                    output["text"] = normalize(output["text"])
                for key, value in output.get("data", {}).items():
                    if isinstance(value, str):
                        output["data"][key] = normalize(value)
    cast("Any", nbformat).write(fresh, NOTEBOOK)
    print(f"wrote {NOTEBOOK.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
