"""ruff for the generators: where it is, and generated source tidied by it.

Every ``tools/gen_*.py`` passes what it writes through ruff with the project's
settings, so a generated file is lint-clean and stable under ``ruff format``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ruff() -> str:
    """The ruff beside this interpreter, or the one on ``PATH``."""
    local = Path(sys.executable).with_name("ruff")
    found = str(local) if local.exists() else shutil.which("ruff")
    if found is None:
        raise SystemExit("ruff is needed to format the generated files (pip install ruff)")
    return found


def tidy(text: str, target: str) -> str:
    """``text`` as ruff leaves the file ``target``: imports sorted, unused ones dropped,
    then formatted."""
    for args in (["check", "--select", "I,F401", "--fix-only", "--exit-zero"], ["format"]):
        result = subprocess.run(
            [ruff(), *args, "--stdin-filename", target, "-"],
            input=text,
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        if result.returncode != 0:
            raise SystemExit(f"ruff {args[0]} failed on {target}:\n{result.stderr}")
        text = result.stdout
    return text
