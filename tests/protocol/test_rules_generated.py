"""The ``(validate.rules)`` checkers written at build time (``tools/gen_rules.py``).

They must be current with the installed xds-protos (``--check``), used only for the
descriptors they were written from (another xds-protos gets checkers written at run
time, never a stale one), and readable in a traceback, as the ones written at run time.
After upgrading xds-protos or changing ``protocol/_rules.py``: ``python tools/gen_rules.py``.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message
from validate import validate_pb2 as pgv

from bench._data import make_cluster
from xds_client.protocol import _rules, _rules_generated, _rules_meanings
from xds_client.resources import resource_types

ROOT = Path(__file__).resolve().parent.parent.parent
CLUSTER_FILE = "envoy/config/cluster/v3/cluster.proto"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_rules", ROOT / "tools" / "gen_rules.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(ROOT / "tools"))  # the tools share tools/_ruff.py
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return module


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> _rules._Compiler:
    compiler = _rules._Compiler()
    monkeypatch.setattr(_rules, "_COMPILER", compiler)
    monkeypatch.setattr(_rules, "_DIGESTS", {})
    return compiler


def _where(check: Any) -> str:
    return str(check.__code__.co_filename)


def _written_now(check: Any) -> bool:
    """Written at run time: ``<rules of ...>``, then `` #2`` ... when a checker of other
    text was written under that name before (another pool's type, a test's settings)."""
    return _where(check).startswith("<rules of envoy.config.cluster.v3.Cluster")


def test_written_modules_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert _tool().main(["--check"]) == 0, capsys.readouterr().out


def test_check_fails_when_the_protos_change(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = _rules.file_digest

    def digest(file: Any) -> str:  # as if xds-protos shipped another cluster.proto
        return "0" * 16 if file.name == CLUSTER_FILE else real(file)

    monkeypatch.setattr(_rules, "file_digest", digest)
    assert _tool().main(["--check"]) == 1
    assert "_rules_generated/__init__.py" in capsys.readouterr().out


def test_a_covered_type_is_checked_by_its_written_module(fresh: _rules._Compiler) -> None:
    check = fresh.for_class(Cluster)
    assert _where(check).endswith("_rules_generated/envoy_config_cluster_v3.py")
    bad = make_cluster(1)
    bad.connect_timeout.seconds = -1
    assert _rules.check_rules(bad) == "connect_timeout: must be greater than 0s"


@pytest.mark.parametrize("changed", [CLUSTER_FILE, "envoy/config/core/v3/base.proto"])
def test_other_descriptors_get_checkers_written_at_run_time(
    fresh: _rules._Compiler, monkeypatch: pytest.MonkeyPatch, changed: str
) -> None:
    """The type's own file, or one it imports, differs from the one the module was
    written from (another xds-protos): the written module is not used."""
    files = dict(_rules_generated.FILES)
    files[changed] = "0" * 16
    monkeypatch.setattr(_rules, "GENERATED_FILES", files)
    check = fresh.for_class(Cluster)
    assert _written_now(check)
    assert _rules.check_rules(make_cluster(1)) is None


def _cluster_with_another_rule() -> type[Message]:
    """``Cluster`` as a newer xds-protos might define it: ``connect_timeout`` must now
    exceed 5s. Same names, other descriptors (in a pool of their own)."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: Any, data: bytes | None = None) -> None:
        for dep in file.dependencies:
            if dep.name not in added:
                add(dep)
        pool.AddSerializedFile(data if data is not None else file.serialized_pb)
        added.add(file.name)

    file = Cluster.DESCRIPTOR.file
    proto = descriptor_pb2.FileDescriptorProto.FromString(file.serialized_pb)
    (message,) = [m for m in proto.message_type if m.name == "Cluster"]
    (field,) = [f for f in message.field if f.name == "connect_timeout"]
    rules = pgv.FieldRules()
    rules.duration.gt.seconds = 5
    field.options.Extensions[pgv.rules].CopyFrom(rules)
    add(file, proto.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(Cluster.DESCRIPTOR.full_name))


def test_a_newer_xds_protos_is_never_checked_by_a_stale_module(fresh: _rules._Compiler) -> None:
    newer = _cluster_with_another_rule()
    cluster: Any = newer.FromString(make_cluster(1).SerializeToString())
    cluster.connect_timeout.seconds = 2
    assert _rules.check_rules(cluster) == "connect_timeout: must be greater than 5s"
    assert _written_now(fresh.for_class(newer))


@pytest.mark.parametrize("written", [True, False])
def test_a_traceback_shows_the_checkers_source(written: bool) -> None:
    compiler = _rules._Compiler(use_generated=written)
    check = compiler.for_class(Cluster)
    assert check is not None
    bad = make_cluster(1)
    bad.connect_timeout.seconds = -1
    with pytest.raises(_rules_meanings._RuleBrokenError) as caught:
        check(bad, [None, False, False])
    text = "".join(traceback.format_exception(caught.value))
    assert _where(check) in text
    assert _where(check).endswith("envoy_config_cluster_v3.py") == written
    assert _written_now(check) != written
    assert "raise broken(" in text  # the line itself, not just its number


def test_every_standard_resource_type_has_a_written_checker() -> None:
    names = {rtype.message_name for rtype in resource_types()}
    assert names <= _rules_generated.TYPES, sorted(names - _rules_generated.TYPES)


def test_a_module_that_cannot_be_read_gives_way_to_one_written_now(
    fresh: _rules._Compiler, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_rules, "_GENERATED_DIR", tmp_path)  # installed without sources
    assert _written_now(fresh.for_class(Cluster))
    assert _rules.check_rules(make_cluster(1)) is None
