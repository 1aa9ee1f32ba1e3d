"""xds_client.load.locust: the gevent workarounds hold, and Locust's totals are exact.

The design rests on gevent and grpc internals (a real OS thread for grpc.aio, the
original names put back while it starts, events through the hub): these tests fail
(or time out) when an upgrade of either breaks it.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from xds_client.load import sample_config
from xds_client.testing import ControlPlane

# Never import locust here: it monkey-patches the whole process (pytest's too).
if importlib.util.find_spec("locust") is None:
    pytest.skip(
        "the locust extra is not installed (it needs Python 3.11+)", allow_module_level=True
    )

HERE = Path(__file__).resolve().parent
LOCUST = [sys.executable, "-m", "locust"]


@pytest.fixture
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(rest_port=None, heartbeat_interval=None) as cp:
        cp.set_snapshot(sample_config(3))
        yield cp


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDS_LOAD_TEST_DIR": str(tmp_path), "GRPC_VERBOSITY": "ERROR"}


def test_the_loop_thread_runs_grpc_aio_inside_a_patched_process(
    plane: ControlPlane, tmp_path: Path
) -> None:
    # In a process Locust has monkey-patched: the loop thread is a real OS thread on the
    # original epoll, and a simulated client reaches a complete config, reported back
    # to a greenlet through the hub.
    script = textwrap.dedent(
        f"""
        import threading, gevent, gevent.queue, locust
        from xds_client.load import Fleet, FleetOptions
        from xds_client.load.locust import loop_thread
        assert locust  # imported first: the process is monkey-patched from here on
        t = loop_thread()
        assert t.thread_id != threading.get_native_id(), "the loop runs on the hub's thread"
        assert type(t.loop._selector).__name__ == "EpollSelector", type(t.loop._selector)
        got = gevent.queue.Queue()
        def on_event(event):
            t.to_gevent(lambda: got.put(event))
        fleet = Fleet(FleetOptions(server={plane.address!r}, nodes=2), on_event=on_event)
        t.call(fleet.add, 2)
        with gevent.Timeout(15, RuntimeError("no first config reached the gevent side")):
            kinds = [got.get().kind, got.get().kind]
        assert kinds == ["first_config", "first_config"], kinds
        t.stop([fleet])
        print("OK")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("OK")
    assert len(plane.streams()) == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.slow
def test_a_master_and_two_workers_count_every_client(plane: ControlPlane, tmp_path: Path) -> None:
    port = _free_port()
    locustfile = str(HERE / "locustfile_xds.py")
    env = {**_env(tmp_path), "XDS_LOAD_TEST_EXPECT": "12"}
    common = ["-f", locustfile, "--host", plane.address]
    master = subprocess.Popen(
        [
            *LOCUST, *common, "--master", "--headless", "--expect-workers", "2",
            "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "-u", "4", "-r", "20", "-t", "60s", "--csv", str(tmp_path / "run"),
            "--only-summary",
        ],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    workers: list[subprocess.Popen[bytes]] = [
        subprocess.Popen(
            [
                *LOCUST,
                *common,
                "--worker",
                "--master-host",
                "127.0.0.1",
                "--master-port",
                str(port),
            ],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        output, _ = master.communicate(timeout=90)
        for worker in workers:
            worker.wait(timeout=30)
    finally:
        processes: list[subprocess.Popen[Any]] = [master, *workers]
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert master.returncode == 0, output[-3000:]
    with (tmp_path / "run_stats.csv").open() as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    first = rows[("xDS", "first config")]
    per_worker = [json.loads(p.read_text())["started"] for p in tmp_path.glob("worker-*.json")]
    assert len(per_worker) == 2
    # 4 users of 3 clients: Locust's total, the workers' sum and the server's streams agree.
    assert int(first["Request Count"]) == sum(per_worker) == 12
    assert int(first["Failure Count"]) == 0
    streams = plane.streams()
    assert len(streams) == 12
    assert len({s.node_id for s in streams}) == 12
    assert len({s.peer for s in streams}) == 12
