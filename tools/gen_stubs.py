"""Regenerate the PEP 561 stubs for xds-protos under ``stubs/`` (``make stubs``).

xds-protos ships ``*_pb2.py`` modules without type information. This script
imports the modules listed in ``MODULES``, reads the serialized
``FileDescriptorProto`` embedded in each of them, walks their imports to get
the closure, and feeds that closure to mypy-protobuf's generator in-process
(no protoc, no .proto sources needed). ``google/protobuf/*`` is left out: the
types-protobuf package already provides those stubs.

Every generated package folder gets an empty ``__init__.pyi`` except
``stubs/google/``, which must stay a namespace so that ``google.protobuf``
keeps resolving to types-protobuf.

With ``--check`` it generates into a temporary folder and fails when the
committed ``stubs/`` differ (stale, missing or extra files).
"""

from __future__ import annotations

import argparse
import filecmp
import importlib
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from google.protobuf import descriptor as _descriptor
from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from mypy_protobuf import main as mypy_protobuf  # type: ignore[import-untyped]

# The xds-protos modules whose types our public API and tests use. Their import
# closure is generated too; add a module here and run `make stubs`.
MODULES: tuple[str, ...] = (
    # discovery v3 / v2
    "envoy.service.discovery.v3.discovery_pb2",
    "envoy.service.discovery.v3.ads_pb2",
    "envoy.api.v2.discovery_pb2",
    "envoy.service.discovery.v2.ads_pb2",
    # core Node / ControlPlane, status, CSDS
    "envoy.config.core.v3.base_pb2",
    "envoy.config.core.v3.address_pb2",
    "envoy.config.core.v3.extension_pb2",
    "google.rpc.status_pb2",
    "envoy.service.status.v3.csds_pb2",
    # load reporting (LRS)
    "envoy.service.load_stats.v3.lrs_pb2",
    # v3 resource types
    "envoy.config.listener.v3.listener_pb2",
    "envoy.config.route.v3.route_pb2",
    "envoy.config.route.v3.scoped_route_pb2",
    "envoy.config.route.v3.route_components_pb2",
    "envoy.config.cluster.v3.cluster_pb2",
    "envoy.config.endpoint.v3.endpoint_pb2",
    "envoy.config.endpoint.v3.endpoint_components_pb2",
    "envoy.extensions.transport_sockets.tls.v3.secret_pb2",
    "envoy.service.runtime.v3.rtds_pb2",
    "envoy.extensions.filters.network.http_connection_manager.v3.http_connection_manager_pb2",
    # v2 resource types
    "envoy.api.v2.listener_pb2",
    "envoy.api.v2.cluster_pb2",
    "envoy.api.v2.route_pb2",
    "envoy.api.v2.endpoint_pb2",
    "envoy.api.v2.scoped_route_pb2",
    "envoy.api.v2.route.route_components_pb2",
    "envoy.api.v2.auth.secret_pb2",
    "envoy.service.discovery.v2.rtds_pb2",
)

# Proto files whose stubs come from another package (types-protobuf).
PROVIDED_ELSEWHERE: tuple[str, ...] = ("google/protobuf/",)
# Top-level folders that must stay namespace packages (no __init__.pyi).
NAMESPACE_ROOTS: frozenset[str] = frozenset({"google"})
# Options passed to mypy-protobuf, as with `--mypy_out=quiet:...`.
PARAMETER = "quiet"

ROOT = Path(__file__).resolve().parent.parent
STUBS = ROOT / "stubs"


def closure(modules: Iterable[str]) -> list[descriptor_pb2.FileDescriptorProto]:
    """The FileDescriptorProtos of ``modules`` and their imports, dependencies first."""
    ordered: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def visit(fd: _descriptor.FileDescriptor) -> None:
        if fd.name in ordered:
            return
        for dep in fd.dependencies:
            visit(dep)
        ordered[fd.name] = descriptor_pb2.FileDescriptorProto.FromString(fd.serialized_pb)

    for name in modules:
        module = importlib.import_module(name)
        file_descriptor = module.DESCRIPTOR
        if not isinstance(file_descriptor, _descriptor.FileDescriptor):
            raise SystemExit(f"{name} has no FileDescriptor")
        visit(file_descriptor)
    return list(ordered.values())


def _request(
    files: list[descriptor_pb2.FileDescriptorProto], to_generate: Iterable[str]
) -> plugin_pb2.CodeGeneratorRequest:
    request = plugin_pb2.CodeGeneratorRequest(parameter=PARAMETER)
    request.proto_file.extend(files)
    request.file_to_generate.extend(to_generate)
    return request


def generate_stubs(modules: Iterable[str] = MODULES) -> dict[str, str]:
    """Map of stub path (relative to ``stubs/``) to content."""
    files = closure(modules)
    own = [fd for fd in files if not fd.name.startswith(PROVIDED_ELSEWHERE)]
    with_services = [fd for fd in own if fd.service]

    options = {
        "quiet": "quiet" in PARAMETER,
        "readable_stubs": "readable_stubs" in PARAMETER,
        "relax_strict_optional_primitives": "relax_strict_optional_primitives" in PARAMETER,
        "use_default_deprecation_warnings": "use_default_deprecation_warnings" in PARAMETER,
        "generate_concrete_servicer_stubs": "generate_concrete_servicer_stubs" in PARAMETER,
    }
    response = plugin_pb2.CodeGeneratorResponse()
    request = _request(files, (fd.name for fd in own))
    mypy_protobuf.generate_mypy_stubs(mypy_protobuf.Descriptors(request), response, **options)
    request = _request(files, (fd.name for fd in with_services))
    mypy_protobuf.generate_mypy_grpc_stubs(
        mypy_protobuf.Descriptors(request),
        response,
        **options,
        grpc_type=mypy_protobuf.GRPCType.from_parameter(PARAMETER),
    )

    out: dict[str, str] = {f.name: f.content for f in response.file}
    for name in list(out):
        for package in PurePosixPath(name).parents:
            if not package.parts or str(package) in NAMESPACE_ROOTS:
                continue
            out.setdefault(str(package / "__init__.pyi"), "")
    return dict(sorted(out.items()))


def write_tree(stubs: Mapping[str, str], base: Path) -> None:
    for name, content in stubs.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8", newline="\n")


def existing_files(base: Path) -> set[str]:
    if not base.is_dir():
        return set()
    return {p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()}


def compare(generated: Path, committed: Path) -> tuple[list[str], list[str], list[str]]:
    """(stale, missing, extra) files of ``committed`` relative to ``generated``."""
    want = existing_files(generated)
    have = existing_files(committed)
    stale = sorted(
        f for f in want & have if not filecmp.cmp(generated / f, committed / f, shallow=False)
    )
    return stale, sorted(want - have), sorted(have - want)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed stubs are stale")
    parser.add_argument("--out", type=Path, default=STUBS, help="stub folder (default: stubs/)")
    args = parser.parse_args(argv)
    target: Path = args.out
    stubs = generate_stubs()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        write_tree(stubs, out)
        stale, missing, extra = compare(out, target)
        if args.check:
            for label, names in (("stale", stale), ("missing", missing), ("extra", extra)):
                if names:
                    print(f"{label} stub files (run `make stubs`):", *names, sep="\n  ")
            return 1 if stale or missing or extra else 0
        for name in extra:
            (target / name).unlink()
        for name in stale + missing:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out / name, target / name)
        for folder in sorted(target.rglob("*"), reverse=True):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    print(
        f"{len(stubs)} stub files in {target}: {len(stale)} updated,"
        f" {len(missing)} added, {len(extra)} removed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
