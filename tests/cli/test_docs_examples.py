"""The README snippet and docs/quickstart.md run as written (only the port changes)."""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from xds_client import ConnectivityChanged, ResourceUpdated
from xds_client.testing import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
ADDRESS = "127.0.0.1:18000"

pytestmark = pytest.mark.timeout(60)


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


class Enough(Exception):  # noqa: N818 - a signal that ends the snippet's endless loop
    """Raised by the fake ``print`` once the snippet showed what we wanted."""


class Printer:
    """Stands in for ``print``: records events and stops the loop after ``wanted`` updates."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.events: list[object] = []

    def __call__(self, event: object) -> None:
        self.events.append(event)
        if sum(isinstance(e, ResourceUpdated) for e in self.events) >= self.wanted:
            raise Enough

    def updated(self) -> list[str]:
        return sorted(e.name for e in self.events if isinstance(e, ResourceUpdated))


def run_sync(code: str, namespace: dict[str, Any], wanted: int) -> Printer:
    printer = Printer(wanted)
    namespace["print"] = printer
    with pytest.raises(Enough):
        exec(compile(code, "<docs>", "exec"), namespace)
    return printer


def run_async(code: str, namespace: dict[str, Any], wanted: int) -> Printer:
    # Top-level `async with` is what a notebook or `python -m asyncio` accepts; wrap it.
    printer = Printer(wanted)
    namespace["print"] = printer
    body = "async def _snippet():\n" + textwrap.indent(code, "    ")
    exec(compile(body, "<docs>", "exec"), namespace)
    with pytest.raises(Enough):
        asyncio.run(namespace["_snippet"]())
    return printer


def test_readme_snippets() -> None:
    sync_code, async_code = python_blocks(ROOT / "README.md")[:2]
    assert len(sync_code.strip().splitlines()) <= 6
    with ControlPlane() as cp:
        cp.set_resources("cds", [_cluster("a"), _cluster("b")])
        namespace: dict[str, Any] = {}
        printer = run_sync(sync_code.replace(ADDRESS, cp.address), namespace, wanted=2)
        assert printer.updated() == ["a", "b"]
        assert isinstance(printer.events[0], ConnectivityChanged)
        printer = run_async(async_code.replace(ADDRESS, cp.address), namespace, wanted=1)
        assert printer.updated() == ["a"]


def test_quickstart_runs_in_order() -> None:
    blocks = python_blocks(ROOT / "docs" / "quickstart.md")
    assert len(blocks) == 3
    server, sync_code, async_code = blocks
    namespace: dict[str, Any] = {}
    exec(compile(server.replace("port=18000", "port=0"), "<quickstart>", "exec"), namespace)
    cp: ControlPlane = namespace["cp"]
    try:
        address = cp.address
        printer = run_sync(sync_code.replace(ADDRESS, address), namespace, wanted=2)
        assert printer.updated() == ["a", "b"]
        printer = run_async(async_code.replace(ADDRESS, address), namespace, wanted=1)
        assert printer.updated() == ["a"]
    finally:
        cp.close()


def _cluster(name: str) -> Any:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    return Cluster(name=name)
