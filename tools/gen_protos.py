"""Regenerate the Python code for our own .proto files (``make protos``).

Writes ``*_pb2.py``, ``*_pb2_grpc.py`` and mypy-protobuf ``*_pb2.pyi`` /
``*_pb2_grpc.pyi`` next to each .proto under ``src/``. With ``--check`` it
generates into a temporary folder and fails when the committed files differ,
so hand edits and stale output are caught by the tests.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PROTOS = sorted(p.relative_to(SRC) for p in SRC.rglob("*.proto"))
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def generate(out: Path) -> None:
    """Run protoc (from grpcio-tools) with the mypy-protobuf plugins into ``out``."""
    from grpc_tools import protoc

    include = Path(protoc.__file__).parent / "_proto"
    plugin_dir = Path(sys.executable).parent
    args = [
        "protoc",
        f"-I{SRC}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--plugin=protoc-gen-mypy={plugin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={plugin_dir / 'protoc-gen-mypy_grpc'}",
        f"--mypy_out=quiet:{out}",
        f"--mypy_grpc_out=quiet:{out}",
        *(str(p) for p in PROTOS),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    pin_grpc_floor(out)


def grpcio_floor() -> str:
    """The lowest grpcio pyproject.toml allows, as three numbers ("1.85" -> "1.85.0")."""
    match = re.search(r'"grpcio>=([0-9.]+)', (ROOT / "pyproject.toml").read_text())
    if match is None:
        raise SystemExit("pyproject.toml names no grpcio>= floor")
    parts = match.group(1).split(".")
    return ".".join([*parts, "0", "0"][:3])


def pin_grpc_floor(out: Path) -> None:
    """Make the generated stubs demand the grpcio floor we declare, not grpcio-tools' own version.

    grpc_tools writes its own version into GRPC_GENERATED_VERSION and the stubs refuse
    any older grpcio at import time; a patch release of the tools would otherwise both
    change the output and narrow what users may install.
    """
    floor = grpcio_floor()
    for stub in out.rglob("*_pb2_grpc.py"):
        text = stub.read_text()
        stub.write_text(
            re.sub(
                r"^GRPC_GENERATED_VERSION = '[^']*'$",
                f"GRPC_GENERATED_VERSION = '{floor}'",
                text,
                flags=re.M,
            )
        )


def generated_files(base: Path) -> list[Path]:
    return [
        proto.with_name(proto.stem + suffix)
        for proto in PROTOS
        for suffix in SUFFIXES
        if (base / proto.with_name(proto.stem + suffix)).exists()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed output is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generate(out)
        files = generated_files(out)
        if args.check:
            stale = [
                str(f)
                for f in files
                if not (SRC / f).exists() or not filecmp.cmp(out / f, SRC / f, shallow=False)
            ]
            if stale:
                print("stale generated files (run `make protos`):", *stale, sep="\n  ")
                return 1
            return 0
        for f in files:
            shutil.copyfile(out / f, SRC / f)
            print("wrote", f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
