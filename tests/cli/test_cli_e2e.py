"""End to end: ``python -m xds_client serve`` and ``watch`` as real processes, and the demo."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from xds_client.resources import CLUSTER

from .conftest import EXAMPLE_RESOURCES

READ_TIMEOUT = 30.0

EXTRA_CLUSTER = """\
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: canary
  type: EDS
  connect_timeout: 2s
  eds_cluster_config: {eds_config: {ads: {}}}
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["GRPC_VERBOSITY"] = "ERROR"
    return env


class Lines:
    """stdout of a process, line by line, with a bounded wait for each line."""

    def __init__(self, stream: IO[str]) -> None:
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def next(self, timeout: float = READ_TIMEOUT) -> dict[str, Any]:
        line = self._queue.get(timeout=timeout)
        assert line is not None, "the process ended early"
        record: dict[str, Any] = json.loads(line)
        return record

    def join(self) -> None:
        self._thread.join(READ_TIMEOUT)


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Lines, Path]]:
    resources = tmp_path / "resources.yaml"
    shutil.copy(EXAMPLE_RESOURCES, resources)
    with (tmp_path / "serve.err").open("w") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "xds_client", "serve", "--json", "-r", str(resources),
             "--store-db", str(tmp_path / "store.db"), "--reload-interval", "0.1"],
            stdout=subprocess.PIPE, stderr=errors, text=True, env=_env(),
        )  # fmt: skip
    assert process.stdout is not None
    lines = Lines(process.stdout)
    try:
        yield process, lines, resources
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(READ_TIMEOUT)
        lines.join()
        process.stdout.close()


@pytest.mark.timeout(120)
def test_serve_reloads_and_stops_on_sigint(
    serve_process: tuple[subprocess.Popen[str], Lines, Path],
) -> None:
    process, lines, resources = serve_process
    serving = lines.next()
    assert serving["event"] == "serving"
    assert serving["resources"] == {"LDS": 1, "RDS": 1, "CDS": 1, "EDS": 1}
    store = lines.next()
    assert store["service"] == "resource-store"

    watch = subprocess.run(
        [sys.executable, "-m", "xds_client", "watch", "--json", "--count", "1", "--timeout",
         "20", "-s", serving["address"], "cds"],
        capture_output=True, text=True, timeout=60, env=_env(), check=False,
    )  # fmt: skip
    assert watch.returncode == 0, watch.stderr
    records = [json.loads(line) for line in watch.stdout.splitlines()]
    assert records[-1]["event"] == "updated"
    assert (records[-1]["type_url"], records[-1]["name"]) == (CLUSTER, "backend")

    health = subprocess.run(
        [sys.executable, "-m", "xds_client", "store", "health", "-s", store["address"]],
        capture_output=True, text=True, timeout=60, env=_env(), check=False,
    )  # fmt: skip
    assert health.returncode == 0, health.stderr

    # Replace the file as editors do (write elsewhere, rename), with a second cluster.
    staged = resources.with_suffix(".new")
    staged.write_text(resources.read_text() + EXTRA_CLUSTER)
    os.replace(staged, resources)
    reloaded = lines.next()
    assert reloaded["event"] == "reloaded"
    assert reloaded["resources"]["CDS"] == 2

    staged.write_text("resources: [{name: no-type}]\n")
    os.replace(staged, resources)
    failed = lines.next()
    assert failed["event"] == "reload_failed"
    assert "@type" in failed["error"]

    process.send_signal(signal.SIGINT)
    assert lines.next()["event"] == "stopped"
    assert process.wait(READ_TIMEOUT) == 0


@pytest.mark.timeout(120)
def test_serve_bad_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources:\n- '@type': type.googleapis.com/nope.Thing\n  name: x\n")
    result = subprocess.run(
        [sys.executable, "-m", "xds_client", "serve", "-r", str(bad)],
        capture_output=True, text=True, timeout=60, env=_env(), check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"xds-client: error: {bad}: resources[0]: unknown '@type' 'type.googleapis.com/nope.Thing'"
    ]


@pytest.mark.timeout(120)
def test_demo_tells_the_whole_story_fast(capsys: pytest.CaptureFixture[str]) -> None:
    from xds_client.cli import main

    started = time.monotonic()
    assert main(["demo", "--fast"]) == 0
    out = capsys.readouterr().out
    assert time.monotonic() - started < 30
    for needle in (
        "== Starting an xDS control plane",
        "[delta] connected to 127.0.0.1:",
        "[sotw ] connected to 127.0.0.1:",
        "[delta] updated         CDS backend",
        "[sotw ] updated         CDS backend  version 1",
        "[sotw ] updated         EDS backend  version 2",
        "[delta] nacked          CDS broken",
        "[sotw ] nacked          CDS",
        "[delta] removed         CDS payments  reason deleted",
        "[sotw ] removed         CDS payments  reason deleted",
        "[delta] removed         EDS canary  reason ttl_expired",
        "[sotw ] removed         EDS canary  reason ttl_expired",
        "[delta] disconnected from 127.0.0.1:",
        "[sotw ] disconnected from 127.0.0.1:",
        "== What each client holds now",
        "== demo finished in",
    ):
        assert needle in out, f"missing {needle!r} in:\n{out}"
    # The story is told in order: the TTL expires before the restart.
    assert out.index("ttl_expired") < out.index("disconnected from")
