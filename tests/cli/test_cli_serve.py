"""serve in-process: the file is served exactly, reloads follow it, bad reloads are kept out."""

from __future__ import annotations

import argparse
import io
import os
import queue
import threading
from collections.abc import Iterator
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


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[Records, Path]]:
    path = tmp_path / "resources.yaml"
    path.write_text(EXAMPLE_RESOURCES.read_text())
    args = argparse.Namespace(
        resources=str(path),
        host="127.0.0.1",
        port=0,
        rest_port=None,
        store_db=None,
        reload_interval=0.05,
    )
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
