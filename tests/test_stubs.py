"""The generated xds-protos stubs under ``stubs/`` are current and really type things."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mypy import api as mypy_api

ROOT = Path(__file__).resolve().parent.parent
STUBS = ROOT / "stubs"
GEN_STUBS = ROOT / "tools" / "gen_stubs.py"
SAMPLES = ROOT / "tests" / "typing_samples"
OK_SAMPLE = SAMPLES / "discovery_ok.py"
REJECTED_SAMPLE = SAMPLES / "rejected" / "discovery_rejected.py"
EXPECT = re.compile(r"#\s*expect:\s*([\w-]+)\s*$")
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[\w-]+)\]$")


def run_gen_stubs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GEN_STUBS), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )


def test_committed_stubs_are_current() -> None:
    result = run_gen_stubs("--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_reports_stale_missing_and_extra(tmp_path: Path) -> None:
    copy = tmp_path / "stubs"
    shutil.copytree(STUBS, copy)
    (copy / "envoy/service/discovery/v3/discovery_pb2.pyi").write_text("x: int\n")
    (copy / "envoy/config/core/v3/base_pb2.pyi").unlink()
    (copy / "envoy/unexpected_pb2.pyi").write_text("")
    result = run_gen_stubs("--check", "--out", str(copy))
    assert result.returncode == 1
    assert "stale stub files" in result.stdout
    assert "envoy/service/discovery/v3/discovery_pb2.pyi" in result.stdout
    assert "missing stub files" in result.stdout
    assert "envoy/config/core/v3/base_pb2.pyi" in result.stdout
    assert "extra stub files" in result.stdout
    assert "envoy/unexpected_pb2.pyi" in result.stdout


def test_google_stays_a_namespace_package() -> None:
    # An __init__.pyi here would hide types-protobuf's google.protobuf stubs.
    assert not (STUBS / "google" / "__init__.pyi").exists()
    assert (STUBS / "google" / "rpc" / "__init__.pyi").exists()
    packages = {p.parent for p in STUBS.rglob("*.pyi")} - {STUBS / "google"}
    missing = sorted(str(p) for p in packages if not (p / "__init__.pyi").exists())
    assert missing == []


@pytest.fixture(scope="module")
def mypy_errors() -> tuple[dict[str, set[tuple[int, str]]], str, int]:
    """One strict mypy run over both samples with the project configuration.

    Returns the errors per sample file name as ``{(line, code)}``, mypy's report
    and its exit status.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)  # mypy_path = "stubs" is relative to the working directory
        report, stderr, status = mypy_api.run(
            [
                "--config-file",
                str(ROOT / "pyproject.toml"),
                "--strict",
                "--show-error-codes",
                "--no-pretty",
                "--no-error-summary",
                str(OK_SAMPLE.relative_to(ROOT)),
                str(REJECTED_SAMPLE.relative_to(ROOT)),
            ]
        )
    assert not stderr, stderr
    errors: dict[str, set[tuple[int, str]]] = {OK_SAMPLE.name: set(), REJECTED_SAMPLE.name: set()}
    for line in report.splitlines():
        match = ERROR.match(line)
        if match:
            errors.setdefault(Path(match["path"]).name, set()).add(
                (int(match["line"]), match["code"])
            )
    return errors, report, status


def expected_errors(sample: Path) -> set[tuple[int, str]]:
    lines = sample.read_text().splitlines()
    return {(n, m[1]) for n, text in enumerate(lines, 1) if (m := EXPECT.search(text))}


def test_typed_sample_passes_strict_mypy(
    mypy_errors: tuple[dict[str, set[tuple[int, str]]], str, int],
) -> None:
    errors, report, _ = mypy_errors
    assert errors[OK_SAMPLE.name] == set(), report


def test_wrong_types_are_rejected_by_strict_mypy(
    mypy_errors: tuple[dict[str, set[tuple[int, str]]], str, int],
) -> None:
    errors, report, status = mypy_errors
    assert status == 1, report
    expected = expected_errors(REJECTED_SAMPLE)
    assert (12, "assignment") in expected  # req.version_info = 3
    assert errors[REJECTED_SAMPLE.name] == expected, report
    assert (
        f"{REJECTED_SAMPLE.relative_to(ROOT).as_posix()}:12: error: Incompatible types in"
        ' assignment (expression has type "int", variable has type "str")  [assignment]'
    ) in report.splitlines()
    assert set(errors) == {OK_SAMPLE.name, REJECTED_SAMPLE.name}, report


def test_typed_sample_runs() -> None:
    """The names the stubs promise exist at runtime too."""
    sys.path.insert(0, str(SAMPLES))
    try:
        discovery_ok = importlib.import_module("discovery_ok")
    finally:
        sys.path.remove(str(SAMPLES))
    assert discovery_ok.build_request().node.id == "n"
    assert discovery_ok.listener_with_hcm().type_url.endswith("envoy.config.listener.v3.Listener")
    assert discovery_ok.v2_response().nonce == "a"
    assert discovery_ok.ads_stub_type().__name__ == "AggregatedDiscoveryServiceStub"
