"""``xds-client conform``: the report formats, the exit status, TLS and a token, and
``--change-command`` making a served resource change for the checks that need a push."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from tests.conformance._mutants import KillOnNack, MutatingProxy
from tests.conformance._servers import serve
from xds_client.conformance import ControlPlaneDriver
from xds_client.testing import ControlPlane

from .conftest import Result
from .test_cli_secure import SERVER_NAME, TOKEN, secured

__all__ = ["secured"]

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def control_plane() -> Iterator[ControlPlane]:
    with ControlPlane() as cp:
        serve(cp)
        yield cp


def test_junit_report_and_exit_zero(cli: Any, control_plane: ControlPlane) -> None:
    result: Result = cli(
        "conform", "-s", control_plane.address, "--protocol", "sotw", "--transport", "ads",
        "-o", "junit",
    )  # fmt: skip
    assert result.code == 0, result.out
    suites = ET.fromstring(result.out.split("\n", 1)[1])
    (suite,) = suites
    assert suite.get("name") == "xds-conformance.sotw.ads"
    cases = {c.get("name"): c for c in suite}
    assert cases["sotw-resubscribe-answered"].find("failure") is None
    skipped = cases["sotw-update-order"].find("skipped")
    assert skipped is not None
    assert skipped.get("message", "").startswith("needs a push")


def test_a_failed_must_exits_one_and_shows_the_wire(cli: Any, control_plane: ControlPlane) -> None:
    proxy = MutatingProxy(control_plane.address, KillOnNack())
    try:
        result: Result = cli(
            "conform", "-s", proxy.address, "--protocol", "delta", "--transport", "per-type",
            "--only", "delta-nack-*", "-o", "json",
        )  # fmt: skip
    finally:
        proxy.close()
    assert result.code == 1
    report = json.loads(result.out)
    (failed,) = report["results"]
    assert failed["outcome"] == "failed"
    assert failed["id"] == "delta-nack-keeps-stream"
    assert "INTERNAL" in failed["message"]
    directions = [e["direction"] for e in failed["evidence"]]
    assert directions[-1] == "ended"
    assert "sent" in directions


def test_unknown_check_is_a_usage_error(cli: Any, control_plane: ControlPlane) -> None:
    result: Result = cli("conform", "-s", control_plane.address, "--only", "no-such-check")
    assert result.code == 2
    assert "no check matches 'no-such-check'" in result.err


def test_tls_and_token(cli: Any, secured: tuple[ControlPlane, Path]) -> None:
    cp, ca_file = secured
    serve(cp)
    args = ("conform", "-s", cp.address, "--ca-file", str(ca_file), "--server-name", SERVER_NAME)
    result: Result = cli(
        *args, "--token", TOKEN, "-H", "x-team=infra", "--protocol", "sotw", "--transport", "ads",
        "--only", "sotw-wildcard-*", "--no-evidence",
    )  # fmt: skip
    assert result.code == 0, result.out + result.err
    assert result.out.count("PASS") == 3
    assert TOKEN not in result.out + result.err
    denied: Result = cli(*args, "--protocol", "sotw", "--transport", "ads")
    assert denied.code == 1
    assert "UNAUTHENTICATED" in denied.err


@pytest.fixture
def change_server(control_plane: ControlPlane) -> Iterator[tuple[int, list[str]]]:
    """A loopback socket: each line ``ACTION TYPE_URL NAME`` is applied to the ControlPlane."""
    driver = ControlPlaneDriver(control_plane)
    seen: list[str] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve_changes() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                line = conn.makefile().readline().split()
                seen.append(" ".join(line))
                action, type_url, name = line
                getattr(driver, action)(type_url, name)
                conn.sendall(b"ok\n")

    thread = threading.Thread(target=serve_changes, daemon=True)
    thread.start()
    yield listener.getsockname()[1], seen
    stop.set()
    thread.join(timeout=5)
    listener.close()


def test_change_command_drives_the_push_checks(
    cli: Any, control_plane: ControlPlane, change_server: tuple[int, list[str]], tmp_path: Path
) -> None:
    port, seen = change_server
    script = tmp_path / "change.py"
    script.write_text(
        "import socket, sys\n"
        f"s = socket.create_connection(('127.0.0.1', {port}))\n"
        "s.sendall((' '.join(sys.argv[1:]) + '\\n').encode())\n"
        "assert s.makefile().readline() == 'ok\\n'\n"
    )
    result: Result = cli(
        "conform", "-s", control_plane.address, "--protocol", "delta", "--transport", "ads",
        "--only", "delta-removed-on-delete", "delta-unsubscribe-stops",
        "--change-command", f"{sys.executable} {script}",
    )  # fmt: skip
    assert result.code == 0, result.out
    assert result.out.count("PASS") == 2
    eds = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
    assert seen == [f"delete {eds} a", f"update {eds} a", f"update {eds} a"]


def test_a_failing_change_command_skips_and_says_why(cli: Any, control_plane: ControlPlane) -> None:
    result: Result = cli(
        "conform", "-s", control_plane.address, "--protocol", "delta", "--transport", "ads",
        "--only", "delta-unsubscribe-stops", "--change-command", "exit 3 #",
    )  # fmt: skip
    assert result.code == 0
    assert "SKIP" in result.out
    assert "the change command failed (exit 3)" in result.out
