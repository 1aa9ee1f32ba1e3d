"""The prebuilt dataclasses are the standard ones, only cheaper to import.

Each class declared with ``xds_client._prebuilt_dataclasses.dataclass`` is compared with
what :func:`dataclasses.dataclass` makes of the same declaration: the module is run a
second time with the prebuilt methods switched off, and the two classes must agree on
their fields, parameters, signature and slots, and on what their instances do.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import xds_client._prebuilt_dataclasses as prebuilt
from xds_client._prebuilt_dataclasses import _methods

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "gen_dataclasses.py"
IMPORT_LINE = "from xds_client import XdsClient, AsyncXdsClient, Node"


def _standard_twin(module_name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``module_name`` run again, with every class made by the standard decorator."""
    monkeypatch.setattr(prebuilt, "ENABLED", False)
    monkeypatch.setattr(prebuilt, "built", [])
    monkeypatch.setattr(prebuilt, "fallbacks", [])
    spec = importlib.util.find_spec(module_name)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not put in sys.modules: the real one stays
    assert len(prebuilt.fallbacks) == len(prebuilt.built)
    return module


def _class(module: ModuleType, qualname: str) -> type:
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part)
    assert isinstance(found, type)
    return found


def _plain(value: Any) -> str:
    """A function by its name, anything else by its repr without addresses: the classes
    compared come from two runs of one module, so their objects are equal, not the same."""
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{type(value).__name__} {value.__qualname__}"
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


def _keys() -> list[str]:
    return sorted(_methods.ENTRIES)


def _split(key: str) -> tuple[str, str]:
    """``xds_client.node.Node`` -> (``xds_client.node``, ``Node``): classes sit at the top."""
    module, _, qualname = key.rpartition(".")
    return module, qualname


def _facts(cls: type) -> dict[str, Any]:
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    fields = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return {
        "fields": [
            (
                f.name, f.type, repr(f.default),
                getattr(f.default_factory, "__qualname__", f.default_factory),
                f.init, f.repr, f.hash, f.compare, dict(f.metadata), f.kw_only,
                f._field_type,
            )
            for f in fields.values()
        ],
        "params": {name: getattr(params, name) for name in type(params).__slots__},
        "signature": str(inspect.signature(cls)),
        "init annotations": getattr(vars(cls).get("__init__"), "__annotations__", None),
        "names": {
            name: _plain(value)
            for name, value in vars(cls).items()
            if name not in ("__dataclass_fields__", "__dataclass_params__")
            and not isinstance(value, dataclasses.Field)
        },
        "mro": [base.__qualname__ for base in cls.__mro__],
        "is dataclass": dataclasses.is_dataclass(cls),
    }  # fmt: skip


def _arguments(cls: type) -> dict[str, Any]:
    """A value for each field without a default: its name in angle brackets."""
    return {
        f.name: f"<{f.name}>"
        for f in dataclasses.fields(cls)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }


def _outcome(action: Any) -> Any:
    try:
        return ("value", action())
    except Exception as error:  # the same error on both sides is agreement
        return ("raised", type(error).__name__, str(error))


def _from_state(cls: type, instance: Any) -> Any:
    """What unpickling does with ``instance``'s state (the twin class has no import path)."""
    made: Any = object.__new__(cls)
    made.__setstate__(instance.__getstate__())
    return made


def _behaviour(cls: type) -> dict[str, Any]:
    arguments = _arguments(cls)
    if _outcome(lambda: cls(**arguments))[0] == "raised":
        return {"made": _outcome(lambda: cls(**arguments))}
    one, two = cls(**arguments), cls(**arguments)
    fields = dataclasses.fields(cls)
    first = fields[0].name if fields else None
    observed: dict[str, Any] = {
        "repr": _outcome(lambda: repr(one)),
        "equal": one == two,
        "hash": _outcome(lambda: hash(one) if vars(cls).get("__hash__") else "by identity"),
        "hashes equal": _outcome(lambda: hash(one) == hash(two)),
        "state": _plain(_outcome(one.__getstate__)),
        "copy equal": _outcome(lambda: copy.copy(one) == one),
        "deep copy equal": _outcome(lambda: copy.deepcopy(one) == one),
        "state round trip": _outcome(lambda: _from_state(cls, one) == one),
        "match args": getattr(cls, "__match_args__", None),
    }
    if first is not None:
        observed["set field"] = _outcome(lambda: setattr(one, first, "<changed>"))
        observed["delete field"] = _outcome(lambda: delattr(two, first))
        changed = _outcome(lambda: dataclasses.replace(cls(**arguments), **{first: "<other>"}))
        observed["replaced"] = (
            changed if changed[0] == "raised" else _outcome(lambda: repr(changed[1]))
        )
        observed["unequal after replace"] = changed[0] == "raised" or changed[1] != cls(**arguments)
    return observed


@pytest.mark.parametrize("key", _keys())
def test_a_prebuilt_class_is_the_standard_dataclass(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module_name, qualname = _split(key)
    mine = _class(importlib.import_module(module_name), qualname)
    assert key not in prebuilt.fallbacks
    standard = _class(_standard_twin(module_name, monkeypatch), qualname)
    assert standard is not mine
    assert _facts(mine) == _facts(standard)
    assert _behaviour(mine) == _behaviour(standard)


def test_the_import_line_compiles_no_dataclass_methods() -> None:
    """Every dataclass the client's import line defines uses prebuilt methods."""
    probe = f"""
import dataclasses, sys
made = []
standard = dataclasses._process_class
def counting(cls, *args):
    made.append(f"{{cls.__module__}}.{{cls.__qualname__}}")
    return standard(cls, *args)
dataclasses._process_class = counting
{IMPORT_LINE}
import xds_client._prebuilt_dataclasses as prebuilt
print(len(prebuilt.built))
print(sorted(name for name in made if name.startswith("xds_client.")))
print(sorted(prebuilt.fallbacks))
"""
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    count, standard, fallbacks = result.stdout.splitlines()
    assert int(count) >= 40
    assert standard == "[]", "declare these with xds_client._prebuilt_dataclasses.dataclass"
    assert fallbacks == "[]", "run python tools/gen_dataclasses.py"


def test_a_changed_declaration_falls_back_to_the_standard_decorator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A class whose declaration no longer matches its methods is built the usual way."""
    monkeypatch.setattr(prebuilt, "fallbacks", [])
    namespace = {
        "__module__": "xds_client.node",
        "__qualname__": "Locality",
        "__doc__": "Locality with a field the generated methods do not know.",
        "__annotations__": {"region": "str", "zone": "str", "sub_zone": "str", "rack": "str"},
        "region": "",
        "zone": "",
        "sub_zone": "",
        "rack": "",
    }
    made: Any = prebuilt.dataclass(frozen=True, slots=True)(type("Locality", (), namespace))
    assert prebuilt.fallbacks == ["xds_client.node.Locality"]
    assert repr(made(rack="r1")) == "Locality(region='', zone='', sub_zone='', rack='r1')"


def test_an_unknown_class_falls_back_to_the_standard_decorator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prebuilt, "fallbacks", [])

    @prebuilt.dataclass(frozen=True, slots=True, kw_only=True)
    class Point:
        """Not on the import line: no methods were written for it."""

        x: int
        y: int = 0

    assert prebuilt.fallbacks == [f"{__name__}.{Point.__qualname__}"]
    assert Point(x=1) == Point(x=1, y=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Point(x=1).x = 2  # type: ignore[misc]


def test_the_generated_methods_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(TOOL), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_the_generator_refuses_what_it_does_not_write(tmp_path: Path) -> None:
    """A declaration outside what the generator writes for is named, with the reason."""
    package = tmp_path / "xds_client_refused"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from __future__ import annotations\n"
        "from xds_client._prebuilt_dataclasses import dataclass\n"
        "@dataclass(order=True, slots=True)\n"
        "class Ordered:\n"
        '    """Ordered values are not prebuilt."""\n'
        "    self: int\n"
    )
    probe = f"""
import sys
sys.path[:0] = [{str(tmp_path)!r}, {str(ROOT / "tools")!r}]
import gen_dataclasses, xds_client._prebuilt_dataclasses as prebuilt
prebuilt.ENABLED = False
import xds_client_refused
made, shape = prebuilt.built[-1]
try:
    gen_dataclasses.factory("xds_client_refused.Ordered", made, shape)
except gen_dataclasses.RefusedError as refused:
    print(refused)
"""
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ("xds_client_refused.Ordered: order=True; fields named self")
