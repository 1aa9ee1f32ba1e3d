"""``xds-client load``: the report, the plot, the hook, and clear failures on bad input."""

from __future__ import annotations

import io
import json
import resource
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from xds_client.cli import run
from xds_client.load import sample_config
from xds_client.testing import ControlPlane


@pytest.fixture
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(rest_port=None, heartbeat_interval=None) as cp:
        cp.set_snapshot(sample_config(3))
        yield cp


def test_the_json_report_counts_what_the_server_saw(cli: Any, plane: ControlPlane) -> None:
    result = cli("load", "-s", plane.address, "-n", "4", "-r", "100", "-d", "1", "-o", "json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    streams = plane.streams()
    assert report["clients_started"] == len(streams) == 4
    assert len({s.peer for s in streams}) == 4  # one connection each
    assert report["first_config"]["count"] == report["clients_complete"]
    assert report["errors"] == {}
    assert report["series"]  # the time series, a sample a second


def test_the_sample_server_pushes_and_the_table_and_plot_show_it(cli: Any, tmp_path: Path) -> None:
    plot = tmp_path / "run.svg"
    result = cli(
        "load", "--sample", "5", "-n", "3", "-d", "2", "--push-interval", "0.4",
        "--plot", str(plot),
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "first config" in result.out
    assert "push to ACK EDS" in result.out
    svg = ET.parse(plot).getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert svg.findall(".//{http://www.w3.org/2000/svg}polyline")
    assert svg.findall(".//{http://www.w3.org/2000/svg}circle")  # a pushed version


def test_a_push_command_runs_once_per_step(cli: Any, plane: ControlPlane, tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    command = f"echo $XDS_LOAD_STEP >> {steps}"
    result = cli(
        "load", "-s", plane.address, "-n", "1", "-d", "1", "--push-interval", "0.3",
        "--push-command", command,
    )  # fmt: skip
    assert result.code == 0, result.err
    lines = steps.read_text().split()
    assert lines  # how many depends on the machine's load; each step once, in order
    assert lines == [str(step) for step in range(1, len(lines) + 1)]


def test_a_failing_push_command_fails_the_run(cli: Any, plane: ControlPlane) -> None:
    result = cli(
        "load", "-s", plane.address, "-n", "1", "-d", "0.5", "--push-interval", "0.2",
        "--push-command", "exit 4",
    )  # fmt: skip
    assert result.code == 1
    assert "push command exited with status 4" in result.err
    assert "Traceback" not in result.err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_only_on_a_terminal(plane: ControlPlane) -> None:
    argv = ["load", "-s", plane.address, "-n", "2", "-d", "2.2"]
    terminal, err = _Terminal(), io.StringIO()
    assert run(argv, terminal, err) == 0
    assert "\r\x1b[K" in terminal.getvalue()
    assert "connected 2" in terminal.getvalue()
    piped = io.StringIO()
    assert run(argv, piped, err) == 0
    assert "\r" not in piped.getvalue()


def test_an_unreachable_server_is_one_line_and_status_1(cli: Any) -> None:
    result = cli("load", "-s", "127.0.0.1:1", "-n", "2", "--connect-timeout", "0.5")
    assert result.code == 1
    assert result.err.startswith("xds-client: error: cannot reach the xDS server at 127.0.0.1:1")
    assert len(result.err.splitlines()) == 1
    assert "Traceback" not in result.err


def test_a_server_refusing_streams_is_one_line_and_status_1(cli: Any, plane: ControlPlane) -> None:
    plane.fail_streams(grpc.StatusCode.UNIMPLEMENTED, "no ADS here", count=None)
    result = cli("load", "-s", plane.address, "-n", "2", "--connect-timeout", "1.5")
    assert result.code == 1
    assert "refused every stream" in result.err
    assert "UNIMPLEMENTED: no ADS here" in result.err
    assert len(result.err.splitlines()) == 1


def test_more_clients_than_descriptors_is_a_usage_error() -> None:
    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    done = subprocess.run(
        [sys.executable, "-m", "xds_client", "load", "-s", "127.0.0.1:1", "-n", "1000"],
        preexec_fn=low_limit,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "1000 clients need about 1064 file descriptors" in done.stderr
    assert "at most 256" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-s", "nowhere"], "bad server address"),
        (["-n", "1"], "give exactly one of --server HOST:PORT and --sample CLUSTERS"),
        (["-s", "127.0.0.1:1", "--sample", "3"], "give exactly one of"),
        (["-s", "127.0.0.1:1", "--push-interval", "1"], "--push-interval needs --push-command"),
        (["-s", "127.0.0.1:1", "--plot", "x.png"], "--plot writes SVG"),
        (["-s", "127.0.0.1:1", "--node-id", "n-{x}"], "bad node id template"),
        (["-s", "127.0.0.1:1", "--churn", "3"], "a share between 0 and 1"),
        (["-s", "127.0.0.1:1", "-n", "0"], "must be at least 1"),
    ],
)
def test_bad_usage_is_status_2(cli: Any, args: list[str], message: str) -> None:
    result = cli("load", *args)
    assert result.code == 2
    assert message in result.err
    assert "Traceback" not in result.err


def test_the_parser_does_not_import_grpc_or_protobuf() -> None:
    # `xds-client --help` stays fast: the load command imports its machinery when it runs.
    code = (
        "import sys\n"
        "from xds_client.cli._args import build_parser\n"
        "build_parser()\n"
        "assert 'grpc' not in sys.modules and 'google.protobuf' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
