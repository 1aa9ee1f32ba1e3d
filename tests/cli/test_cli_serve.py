"""serve in-process: the file is served exactly, reloads follow it, bad reloads are kept out."""

from __future__ import annotations

import argparse
import io
import os
import queue
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from xds_client import Node, ResourceRemoved, ResourceUpdated, XdsClient
from xds_client.cli._output import Output
from xds_client.cli._serve import run_serve

from .conftest import EXAMPLE_RESOURCES

pytestmark = pytest.mark.timeout(60)

WAIT = 15.0
CANARY = """\
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: canary
  connect_timeout: 2s
"""


class Records(Output):
    """An Output that hands each JSON record to the test."""

    def __init__(self) -> None:
        super().__init__(io.StringIO(), io.StringIO(), format="json")
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def json(self, value: Any) -> None:
        self.queue.put(value)

    def next(self) -> dict[str, Any]:
        record: dict[str, Any] = self.queue.get(timeout=WAIT)
        return record


@contextmanager
def _serve(tmp_path: Path, **options: Any) -> Iterator[tuple[Records, Path]]:
    path = tmp_path / "resources.yaml"
    path.write_text(EXAMPLE_RESOURCES.read_text())
    args = argparse.Namespace(
        resources=str(path),
        host="127.0.0.1",
        port=0,
        rest_port=None,
        store_db=None,
        store_port=None,
        reload_interval=0.05,
        validate=False,
    )
    for name, value in options.items():
        setattr(args, name, value)
    out, stop = Records(), threading.Event()
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(run_serve(args, out, stop)))
    worker.start()
    try:
        yield out, path
    finally:
        stop.set()
        worker.join(WAIT)
    assert codes == [0]


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[Records, Path]]:
    with _serve(tmp_path) as served:
        yield served


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_store_port_serves_a_store_in_memory_on_that_port(tmp_path: Path) -> None:
    # docs/cli.md names the store's port; --store-port alone means "in memory".
    port = _free_port()
    with _serve(tmp_path, store_port=port) as (out, _):
        assert out.next()["event"] == "serving"
        store = out.next()
        assert store["service"] == "resource-store"
        assert store["address"] == f"127.0.0.1:{port}"
        assert store["database"] == ":memory:"
    assert not list(tmp_path.glob("*.db"))


def test_store_db_is_announced_by_its_full_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative --store-db: the announcement says where it went
    with _serve(tmp_path, store_db="store.db") as (out, _):
        out.next()
        assert out.next()["database"] == str(tmp_path.resolve() / "store.db")


def _replace(path: Path, text: str) -> None:
    staged = path.with_suffix(".new")
    staged.write_text(text)
    os.replace(staged, path)


def test_reload_serves_exactly_the_new_file(serving: tuple[Records, Path]) -> None:
    out, path = serving
    first = out.next()
    assert first["event"] == "serving"
    events: queue.SimpleQueue[object] = queue.SimpleQueue()
    with (
        XdsClient(first["address"], node=Node(id="serve-test")) as client,
        client.watch("lds", None, on_event=events.put),
        client.watch("cds", None, on_event=events.put),
    ):
        client.wait_for("lds", "ingress", timeout=WAIT)
        text = EXAMPLE_RESOURCES.read_text()
        # Drop the listener (the first entry) and add a cluster.
        start = text.index('- "@type": type.googleapis.com/envoy.config.listener')
        end = text.index('- "@type": type.googleapis.com/envoy.config.route')
        _replace(path, text[:start] + text[end:] + CANARY)
        reloaded = out.next()
        assert reloaded["event"] == "reloaded"
        assert reloaded["resources"] == {"RDS": 1, "CDS": 2, "EDS": 1}
        seen: set[tuple[str, str]] = set()
        while not {("updated", "canary"), ("removed", "ingress")} <= seen:
            event = events.get(timeout=WAIT)
            if isinstance(event, ResourceUpdated):
                seen.add(("updated", event.name))
            elif isinstance(event, ResourceRemoved):
                seen.add(("removed", event.name))

        _replace(path, "resources: not a list\n")
        failed = out.next()
        assert failed["event"] == "reload_failed"
        assert "resources:" in failed["error"]
        assert set(client.resources("cds")) == {"backend", "canary"}  # still served


def test_an_edited_file_that_pins_its_version_still_gets_a_new_one(
    serving: tuple[Records, Path],
) -> None:
    out, path = serving
    assert out.next()["version"] == "1"  # the file says version_info "1"
    _replace(path, EXAMPLE_RESOURCES.read_text() + CANARY)
    reloaded = out.next()
    assert reloaded["event"] == "reloaded"
    assert reloaded["version"] not in ("", "1")  # clients must see that it changed
    assert "version_info '1'" in reloaded["note"]


INVALID = """\
resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: bad
  connect_timeout: -1s
"""


def test_invalid_resources_are_served_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(INVALID)
    args = argparse.Namespace(resources=str(path), host="127.0.0.1", port=0, rest_port=None,
                              store_db=None, store_port=None, reload_interval=0.05,
                              validate=False)  # fmt: skip
    out, stop = Records(), threading.Event()
    worker = threading.Thread(target=run_serve, args=(args, out, stop))
    worker.start()
    try:
        # The default: a warning naming the resource and field, then the file is served.
        warning = out.next()
        assert warning["event"] == "warning"
        assert "connect_timeout" in warning["error"]
        assert "--validate" in warning["error"]
        assert out.next()["event"] == "serving"
    finally:
        stop.set()
        worker.join(WAIT)


def test_validate_refuses_invalid_resources(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(INVALID)
    result = cli("serve", "--resources", str(path), "--validate")
    assert result.code == 2
    assert "connect_timeout" in result.err
    assert "Traceback" not in result.err
