"""docs/api.md is generated from the docstrings and must be current."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_api_docs", ROOT / "tools" / "gen_api_docs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    # After changing a public docstring: python tools/gen_api_docs.py
    assert _tool().main(["--check"]) == 0, capsys.readouterr().err


def test_api_reference_is_deterministic_and_complete() -> None:
    tool = _tool()
    first = tool.render()
    assert first == tool.render()
    assert " at 0x" not in first
    for name in ("### `XdsClient`", "### `ResourceStoreClient`", "### `ControlPlane`",
                 "### `main`", "### `ResourceUpdated`"):  # fmt: skip
        assert name in first


def test_overloads_are_rendered() -> None:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    # XdsClient.wait_for(Cluster, ...) returns a Cluster: the reference says so.
    assert "`wait_for(resource: type[M], name: str, *, version: str | None = None" in text
    assert "-> M`" in text
    assert "wait_for(resource: ResourceSpec" not in text  # the untyped implementation


def test_type_aliases_read_as_types() -> None:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    # WatchEvent whole, with public names only; Value as a type, not a quoted string.
    line = next(x for x in text.splitlines() if x.startswith("WatchEvent = "))
    assert "._" not in line
    assert not line.endswith("...")
    assert "ConnectivityChanged" in line
    assert "ResourceUpdated[M]" in line
    assert "Value = bytes | Mapping[str, Any]" in text
    assert "ControlPlaneFactory = Callable[..., ControlPlane]" in text


def test_classes_do_not_return_none() -> None:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert not [x for x in text.splitlines() if x.startswith("class ") and x.endswith("-> None")]


def test_pytest_fixtures_are_listed() -> None:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert "## pytest fixtures" in text
    fixtures = ["xds_control_plane", "xds_control_plane_factory", "xds_client_connected",
                "xds_async_client", "resource_store_server", "resource_store_client"]  # fmt: skip
    for fixture in fixtures:
        assert f"### `{fixture}`" in text, fixture
