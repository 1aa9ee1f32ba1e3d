#!/usr/bin/env python3
"""Write the methods of the prebuilt dataclasses (``xds_client._prebuilt_dataclasses``).

Every module of ``src/xds_client`` that takes ``dataclass`` from
``_prebuilt_dataclasses`` is imported with the prebuilt methods switched off, so each
class goes through :func:`dataclasses.dataclass` first: a declaration the standard
decorator refuses fails here, at build time. For each class the generator then writes
one function that makes the methods the standard decorator makes (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, the frozen setters and the pickling pair),
equal in behaviour to Python 3.11's (``tests/test_prebuilt_dataclasses.py`` compares them
class by class), and the class's shape, which the decorator compares at import.

The declarations it writes for are the ones the import line needs: slotted, with
``init``, without ``order``, ``unsafe_hash`` or ``weakref_slot``, with a docstring, no
dataclass base, no ``ClassVar``/``InitVar`` field and no special method of their own
but ``__init__``, ``__repr__``, ``__eq__`` and ``__post_init__`` (which the standard
decorator leaves as written). Anything else is refused with the class and the reason.

    python tools/gen_dataclasses.py           # rewrite _prebuilt_dataclasses/_methods.py
    python tools/gen_dataclasses.py --check   # fail when it is stale
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

from _ruff import tidy

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
TARGET = "src/xds_client/_prebuilt_dataclasses/_methods.py"
TRICK = "_prebuilt_dataclasses"

# Names the generated ``__init__`` uses besides its parameters: a field may not be called so.
RESERVED = frozenset({"self", "FACTORY", "_set"})

# Methods a class may write itself: the standard decorator then leaves them alone.
OWN = frozenset({"__init__", "__repr__", "__eq__", "__post_init__"})


class RefusedError(Exception):
    """A declaration the generator does not write methods for."""


def users() -> list[str]:
    """The modules of src/xds_client that import ``dataclass`` from the trick package."""
    found = []
    for path in sorted((SRC / "xds_client").rglob("*.py")):
        if TRICK in path.parts:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(TRICK):
                parts = path.relative_to(SRC).with_suffix("").parts
                found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
                break
    return found


def _check(key: str, made: type, shape: tuple[Any, ...]) -> dict[str, bool]:
    """The options of a declaration the generator supports; raises :class:`RefusedError`."""
    from xds_client._prebuilt_dataclasses import _OPTIONS, _SPECIAL

    options = dict(zip(_OPTIONS, shape[0], strict=True))
    wrong = [
        reason
        for reason, bad in (
            ("init=False", not options["init"]),
            ("order=True", options["order"]),
            ("unsafe_hash=True", options["unsafe_hash"]),
            ("no slots=True", not options["slots"]),
            ("weakref_slot=True", options["weakref_slot"]),
            ("no docstring", not shape[3]),
            ("a metaclass", not shape[4]),
            ("a dataclass base", shape[5]),
        )
        if bad
    ]
    own = [name for name in shape[2] if name not in OWN]
    if own:
        wrong.append(f"its own {', '.join(own)}")
    names = [field[0] for field in shape[1]]
    declared: dict[str, Any] = vars(made)["__dataclass_fields__"]
    if list(declared) != names or any(
        field._field_type is not dataclasses._FIELD  # type: ignore[attr-defined]
        for field in declared.values()
    ):
        wrong.append("a ClassVar, InitVar or KW_ONLY annotation")
    if any(not isinstance(field[1], str) for field in shape[1]):
        wrong.append("annotations that are not strings (from __future__ import annotations)")
    clash = sorted(RESERVED.intersection(names)) + [n for n in names if n.startswith("_dflt_")]
    if clash:
        wrong.append(f"fields named {', '.join(clash)}")
    if wrong:
        raise RefusedError(f"{key}: {'; '.join(wrong)}")
    assert set(_SPECIAL) >= set(shape[2])
    return options


def _tuple(items: list[str]) -> str:
    """``(a, b)`` with the trailing comma a one-item tuple needs."""
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def factory(key: str, made: type, shape: tuple[Any, ...]) -> tuple[str, str]:
    """The name and the source of the function that makes ``key``'s methods."""
    options = _check(key, made, shape)
    function = key.removeprefix("xds_client.").replace(".", "__")
    fields: list[dataclasses.Field[Any]] = list(vars(made)["__dataclass_fields__"].values())
    frozen = options["frozen"]
    defaults = [f"_dflt_{f.name}" for f in fields if _has_default(f)]
    parameters = "".join(f", {default}: Any" for default in defaults)
    lines = [
        f"def {function}(cls: Any, FACTORY: Any{parameters}) -> Methods:",
        f'    """{key}: {", ".join(_describe(options))}."""',
    ]
    own = set(shape[2])
    made_names = []
    if "__init__" not in own:
        made_names.append("__init__")
        lines += _init(fields, frozen, "__post_init__" in own)
    if options["repr"] and "__repr__" not in own:
        made_names.append("__repr__")
        shown = _tuple([repr(f.name) for f in fields if f.repr]) if fields else "()"
        lines += ["", f"    __repr__ = _repr({shown})"]
    compared = [f.name for f in fields if f.compare]
    if options["eq"] and "__eq__" not in own:
        made_names.append("__eq__")
        mine = _tuple([f"self.{name}" for name in compared]) if compared else "()"
        theirs = _tuple([f"other.{name}" for name in compared]) if compared else "()"
        lines += [
            "",
            "    def __eq__(self: Any, other: Any) -> Any:",
            "        if other.__class__ is self.__class__:",
            f"            return {mine} == {theirs}",
            "        return NotImplemented",
        ]
    if options["eq"] and frozen:
        made_names.append("__hash__")
        hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
        values = _tuple([f"self.{name}" for name in hashed]) if hashed else "()"
        lines += ["", "    def __hash__(self: Any) -> int:", f"        return hash({values})"]
    if frozen:
        made_names += ["__setattr__", "__delattr__"]
        names = _tuple([repr(f.name) for f in fields]) if fields else "()"
        lines += ["", f"    __setattr__, __delattr__ = _frozen(cls, {names})"]
    returned = ", ".join(f'"{name}": {name}' for name in made_names)
    if options["eq"] and not frozen:
        returned += ', "__hash__": None'
    if frozen:  # the pickling pair a slotted frozen class needs, shared as in the standard one
        returned += ', "__getstate__": _dataclass_getstate, "__setstate__": _dataclass_setstate'
    lines += ["", f"    return {{{returned}}}"]
    return function, "\n".join(lines) + "\n"


def _has_default(field: dataclasses.Field[Any]) -> bool:
    return (
        field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
    )


def _describe(options: dict[str, bool]) -> list[str]:
    said = [name for name in ("frozen", "kw_only") if options[name]]
    said += [f"{name}=False" for name in ("repr", "eq", "match_args") if not options[name]]
    return [*said, "slots"]


def _init(fields: list[dataclasses.Field[Any]], frozen: bool, post_init: bool) -> list[str]:
    """``__init__`` as Python 3.11 writes it: positional fields, then ``*``, then keywords."""
    parameters = ["self: Any"]
    keywords: list[str] = []
    for f in fields:
        if not f.init:
            continue
        if f.default_factory is not dataclasses.MISSING:
            spelled = f"{f.name}: Any = FACTORY"
        elif f.default is not dataclasses.MISSING:
            spelled = f"{f.name}: Any = _dflt_{f.name}"
        else:
            spelled = f"{f.name}: Any"
        (keywords if f.kw_only else parameters).append(spelled)
    if keywords:
        parameters += ["*", *keywords]
    body = []
    for f in fields:
        if f.default_factory is not dataclasses.MISSING:
            value = (
                f"_dflt_{f.name}() if {f.name} is FACTORY else {f.name}"
                if f.init
                else f"_dflt_{f.name}()"
            )
        elif f.init:
            value = f.name
        elif f.default is not dataclasses.MISSING:
            value = f"_dflt_{f.name}"
        else:
            continue
        body.append(f'_set(self, "{f.name}", {value})' if frozen else f"self.{f.name} = {value}")
    if post_init:
        body.append("self.__post_init__()")
    return [
        "",
        f"    def __init__({', '.join(parameters)}) -> None:",
        *(f"        {line}" for line in body or ["pass"]),
    ]


HEADER = '''\
# Generated by tools/gen_dataclasses.py: do not edit.
# ruff: noqa
"""The methods of the classes declared with ``xds_client._prebuilt_dataclasses.dataclass``.

Each function makes one class's methods: ``__init__``, ``__eq__`` and ``__hash__`` in the
words :func:`dataclasses.dataclass` uses on Python 3.11, ``__repr__`` and the frozen
setters from the two makers below (one code object each for every class: less to load).
``ENTRIES`` maps the class to the shape it was written for and its function. See the
package's docstring for how they are used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import FrozenInstanceError
from reprlib import recursive_repr
from typing import Any

Methods = dict[str, Any]

_set = object.__setattr__


def _dataclass_getstate(self: Any) -> list[Any]:
    return [getattr(self, name) for name in self.__dataclass_fields__]


def _dataclass_setstate(self: Any, state: list[Any]) -> None:
    for name, value in zip(self.__dataclass_fields__, state, strict=True):
        _set(self, name, value)


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    """``__repr__`` showing ``names``: ``Class(a=1, b='x')``."""

    @recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _frozen(cls: Any, names: tuple[str, ...]) -> tuple[Callable[..., None], Callable[..., None]]:
    """``__setattr__`` and ``__delattr__`` of a frozen class with the fields ``names``."""
    fields = frozenset(names)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in fields:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in fields:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__
'''


def generate() -> str:
    import xds_client._prebuilt_dataclasses as trick

    trick.ENABLED = False
    for module in users():
        importlib.import_module(module)
    problems: list[str] = []
    functions: list[str] = []
    entries: list[str] = []
    for made, shape in sorted(trick.built, key=lambda item: _key(item[0])):
        key = _key(made)
        try:
            name, source = factory(key, made, shape)
        except RefusedError as refused:
            problems.append(str(refused))
            continue
        functions.append(source)
        entries.append(f"    {key!r}: ({shape!r}, {name}),")
    if problems:
        raise SystemExit("cannot prebuild:\n" + "\n".join(problems))
    text = "\n\n".join([HEADER, *functions])
    text += "\n\nENTRIES: dict[str, tuple[tuple[Any, ...], Callable[..., Methods]]] = {\n"
    text += "\n".join(entries) + "\n}\n"
    return tidy(text, TARGET)


def _key(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail instead of writing")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(SRC))
    text = generate()
    path = ROOT / TARGET
    if path.exists() and path.read_text() == text:
        return 0
    if args.check:
        print(f"{TARGET} is stale: run python tools/gen_dataclasses.py", file=sys.stderr)
        return 1
    path.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
