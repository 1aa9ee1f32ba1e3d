"""The locks in locks/ pin every environment ``make test`` installs, and agree with what
they were made from: a dependency added to pyproject.toml without ``make lock`` fails here,
not on a fresh machine the day a new release of it appears."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_tool", ROOT / "tools" / "lock.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock = _load_tool()


def _pins(name: str) -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "locks" / f"{name}.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            package, _, version = line.partition("==")
            assert version, f"locks/{name}.txt: {line!r} is not pinned with =="
            pins[canonicalize_name(package)] = Version(version)
    return pins


def _project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in [*project["dependencies"], *extras["dev"]]]


def test_the_dev_lock_pins_every_requirement_within_its_range() -> None:
    pins = _pins("dev")
    for requirement in _project_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in locks/dev.txt: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"locks/dev.txt pins {requirement.name}=={pins[name]} outside {requirement}"
        )


@pytest.mark.parametrize("name", ["envoy", "sovereign"])
def test_a_peer_lock_pins_the_peer_it_was_made_for(name: str) -> None:
    pins = _pins(name)
    for requirement in map(Requirement, lock.PYTHON_ENVIRONMENTS[name]):
        pinned = pins.get(canonicalize_name(requirement.name))
        assert pinned is not None, f"locks/{name}.txt lacks {requirement.name}"
        assert requirement.specifier.contains(pinned), f"{requirement.name}=={pinned}"


def test_the_npm_lock_holds_the_grpc_js_versions_asked_for() -> None:
    folder = ROOT / "locks" / "grpc-js-xds"
    lockfile = json.loads((folder / "package-lock.json").read_text())
    for spec in lock.NPM_PACKAGES:
        package, _, wanted = spec.rpartition("@")
        locked = lockfile["packages"][f"node_modules/{package}"]["version"]
        assert locked.startswith(f"{wanted}."), f"{package} {locked} is not {wanted}.x"


def test_the_go_peer_requires_exactly_the_go_control_plane_versions_asked_for() -> None:
    go_mod = (lock.GO_PEER / "go.mod").read_text()
    go_sum = (lock.GO_PEER / "go.sum").read_text()
    for spec in lock.GO_MODULES:
        module, _, version = spec.partition("@")
        assert re.search(rf"^\s+{re.escape(module)} {re.escape(version)}$", go_mod, re.MULTILINE), (
            f"go.mod does not require {module} {version}: run `make lock`"
        )
        assert f"{module} {version} h1:" in go_sum, f"go.sum lacks {module} {version}"


def test_the_makefile_installs_from_the_locks() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOCK \?= locks/dev\.txt$", makefile, re.MULTILINE)
    assert "$(CONSTRAINTS) -e '.[dev]'" in makefile
    for name in ("envoy", "sovereign"):
        assert f"-r locks/{name}.txt" in makefile
    assert "npm ci" in makefile
    assert "-mod=readonly" in makefile
