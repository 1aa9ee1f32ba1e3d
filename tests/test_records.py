"""``record`` classes behave as the ``@dataclass`` of the same fields (issue #18).

Each public record is held against a real dataclass built from its own fields and
methods: fields, parameters, signature, repr, equality, hashing, immutability,
``replace``, ``asdict``, pickling, pattern matching and subclassing.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xds_client._records import _NO_HEAD, _head, _Lazy, record
from xds_client._records import field as record_field

# The package's value types are standard dataclasses since #32: this module tests
# ``record`` itself, which stays only while client/_session.py imports it.


def _mutations(target: object, field: str) -> list[Any]:
    return [
        _outcome(lambda: setattr(target, field, 1)),
        _outcome(lambda: delattr(target, field)),
        # only whether it raises: CPython's slotted frozen dataclass raises TypeError here
        # by a bug (its __setattr__ names the class from before the slots were added)
        _outcome(lambda: setattr(target, "extra", 1))[0],
    ]


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return ("ok", call())
    except Exception as exc:
        return ("raises", type(exc))


def test_the_generic_parts_match_dataclasses_on_every_kind_of_field() -> None:
    def body() -> dict[str, Any]:
        return {
            "__annotations__": {
                "a": "int",
                "b": "list[int]",
                "c": "str",
                "d": "int",
                "e": "ClassVar[int]",
                "f": "int",
            },
            "b": dataclasses.field(default_factory=list),
            "c": dataclasses.field(default="x", repr=False),
            "d": dataclasses.field(default=1, compare=False),
            "e": 5,
            "f": dataclasses.field(default=2, hash=False),
            "__post_init__": lambda self: object.__setattr__(self, "_seen", True),
            "__module__": __name__,
            "__doc__": "doc",
        }

    for frozen in (False, True):
        for eq in (False, True):
            ours: Any = record(frozen=frozen, eq=eq)(type("R", (), body()))
            real: Any = dataclasses.dataclass(frozen=frozen, eq=eq)(type("R", (), body()))
            _same_behaviour(ours, real, frozen=frozen, eq=eq)


def test_records_made_without_dataclasses_match_them_on_every_kind_of_field() -> None:
    # No pseudo-field: ``record`` finds the fields itself and ``dataclasses`` makes
    # ``__dataclass_fields__`` only when something asks for it.
    def body(make_field: Callable[..., Any], slots: bool) -> dict[str, Any]:
        seen = "_seen" if not slots else "e"  # a slotted instance has no other attribute
        return {
            "__annotations__": {"a": "int", "b": "list[int]", "c": "str", "d": "int", "f": "int"},
            "b": make_field(default_factory=list),
            "c": make_field(default="x", repr=False),
            "d": make_field(default=1, compare=False),
            "e": 5,
            "f": make_field(default=2, hash=False),
            "__post_init__": lambda self: (
                object.__setattr__(self, seen, True) if seen == "_seen" else None
            ),
            "__module__": __name__,
            "__doc__": "doc",
        }

    for frozen in (False, True):
        for eq in (False, True):
            for slots in (False, True):
                ours: Any = record(frozen=frozen, eq=eq, slots=slots)(
                    type("R", (), body(record_field, slots))
                )
                assert isinstance(ours.__dict__["__dataclass_fields__"], _Lazy)
                real: Any = dataclasses.dataclass(frozen=frozen, eq=eq, slots=slots)(
                    type("R", (), body(dataclasses.field, slots))
                )
                _same_behaviour(ours, real, frozen=frozen, eq=eq, slots=slots)
                assert [
                    (f.name, f.type, f.default, f.default_factory, f.repr, f.hash, f.compare)
                    for f in dataclasses.fields(ours)
                ] == [
                    (f.name, f.type, f.default, f.default_factory, f.repr, f.hash, f.compare)
                    for f in dataclasses.fields(real)
                ]
                assert ("b" in ours.__dict__) == ("b" in real.__dict__)
                if not slots:  # the defaults are class attributes
                    assert (ours.c, ours.d, real.c, real.d) == ("x", 1, "x", 1)
                assert ours.__dict__.get("__slots__") == real.__dict__.get("__slots__")
                x, y = ours(1), real(1)
                assert repr(copy.deepcopy(x)) == repr(copy.deepcopy(y))  # as pickling does


def test_record_raises_where_dataclass_does() -> None:
    pairs: list[tuple[Any, Any]] = [
        (record, record_field),
        (dataclasses.dataclass, dataclasses.field),
    ]
    for make, make_field in pairs:
        with pytest.raises(ValueError, match="mutable default"):
            make(type("R", (), {"__annotations__": {"a": "list[int]"}, "a": [],
                                "__module__": __name__}))  # fmt: skip
        with pytest.raises(TypeError, match="non-default argument 'b' follows default"):
            make(type("R", (), {"__annotations__": {"a": "int", "b": "int"}, "a": 1,
                                "__module__": __name__}))  # fmt: skip
        with pytest.raises(TypeError, match="'a' is a field but has no type annotation"):
            make(type("R", (), {"a": make_field(default=1), "__module__": __name__}))
        with pytest.raises(ValueError, match="cannot specify both default and default_factory"):
            make_field(default=1, default_factory=list)


def test_a_record_loads_dataclasses_only_when_asked() -> None:
    script = (
        "from __future__ import annotations\n"
        "import sys\n"
        "from xds_client._records import record, field\n"
        "@record(frozen=True, slots=True)\n"
        "class R:\n"
        "    a: int\n"
        "    b: list = field(default_factory=list)\n"
        "r = R(1)\n"
        "assert (r, r.b, R.__match_args__) == (R(1, []), [], ('a', 'b'))\n"
        "from xds_client._records import replace\n"
        "assert replace(r, a=2) == R(2, []) and replace(r) == r and replace(r) is not r\n"
        "@record\n"
        "class S:\n"
        "    a: int\n"
        "    c: int = field(default=0, init=False)\n"
        "for bad, error in (({'c': 1}, ValueError), ({'x': 1}, TypeError)):\n"
        "    try:\n"
        "        replace(S(1), **bad)\n"
        "    except error:\n"
        "        pass\n"
        "    else:\n"
        "        raise AssertionError(bad)\n"
        "assert 'dataclasses' not in sys.modules\n"
        "import dataclasses\n"
        "assert dataclasses.is_dataclass(r)\n"
        "assert [f.name for f in dataclasses.fields(R)] == ['a', 'b']\n"
        "assert dataclasses.replace(r, a=2) == R(2, [])\n"
        "assert type(R.__dict__['__dataclass_fields__']) is dict\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    # Annotations that are not strings: dataclasses processes the fields, as before.
    fallback = script.replace("from __future__ import annotations\n", "").replace(
        "assert 'dataclasses' not in sys.modules\n", "assert 'dataclasses' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", fallback], check=True, timeout=60)


def _same_behaviour(ours: Any, real: Any, *, frozen: bool, eq: bool, slots: bool = False) -> None:
    assert str(inspect.signature(ours)) == str(inspect.signature(real))
    x, y = ours(1, [2], "s", 3, 4), real(1, [2], "s", 3, 4)
    assert repr(x) == repr(y)
    if not slots:
        assert x._seen
        assert y._seen
    assert (x == ours(1, [2], "s", 9, 4)) == (y == real(1, [2], "s", 9, 4))
    assert (x == ours(2, [2], "s", 3, 4)) == (y == real(2, [2], "s", 3, 4))
    assert _outcome(lambda: hash(x))[0] == _outcome(lambda: hash(y))[0]
    x, y = ours(1, (2,), "s", 3, 4), real(1, (2,), "s", 3, 4)  # hashable values
    assert _outcome(lambda: hash(x)) == _outcome(lambda: hash(y)) or not (frozen and eq)
    assert ours(1).b is not ours(1).b
    if not slots:  # a slotted frozen dataclass's error names the class from before its slots
        assert _mutations(x, "a") == _mutations(y, "a")
    assert _outcome(lambda: ours(1, a=1)) == ("raises", TypeError)
    assert _outcome(lambda: ours(1, [], "", 1, 1, 1)) == ("raises", TypeError)
    assert _outcome(ours) == ("raises", TypeError)
    assert ours.e == 5
    assert [f.name for f in dataclasses.fields(ours)] == ["a", "b", "c", "d", "f"]
    assert repr(ours.__dataclass_params__) == repr(real.__dataclass_params__)


def test_record_refuses_what_it_does_not_implement() -> None:
    with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__"):
        record(frozen=True)(
            type("R", (), {"__annotations__": {"a": "int"}, "__setattr__": lambda *a: None})
        )
    with pytest.raises(TypeError, match="InitVar"):
        record(type("R", (), {"__annotations__": {"a": dataclasses.InitVar[int]}}))


class _Holder:
    """ClassVar import kept for the synthetic annotations above."""

    unused: ClassVar[int] = 0


def test_a_record_that_holds_itself_reprs_as_its_dataclass() -> None:
    # record's __repr__ guards recursion itself (as reprlib.recursive_repr, which
    # dataclasses uses), per thread and per object: the inner self shows as "...".
    def body() -> dict[str, Any]:
        return {"__annotations__": {"a": "list[Any]", "b": "int"}, "__module__": __name__}

    ours: Any = record(frozen=True)(type("R", (), body()))
    real: Any = dataclasses.dataclass(frozen=True)(type("R", (), body()))
    x, y = ours([], 1), real([], 1)
    x.a.append(x)
    y.a.append(y)
    assert repr(x) == repr(y) == "R(a=[...], b=1)"
    x.a.append(ours([x], 2))  # another object of the class is shown, itself elided
    y.a.append(real([y], 2))
    first = repr(x)
    assert first == repr(y)
    assert repr(x) == first  # the guard is released after each call


_ANNOTATION_CHARS = " \t\n\u00a0\u2003._[]|,()'\"abcXYZ_019\u00e9\u0660\u2167\u00b2-"


@given(st.text(alphabet=_ANNOTATION_CHARS, max_size=24))
@settings(max_examples=2000, deadline=None)
def test_the_annotation_head_is_dataclasses_regular_expression(text: str) -> None:
    # record reads an annotation's head as dataclasses' _MODULE_IDENTIFIER_RE does,
    # without compiling it at import: unicode letters, digits and spaces included.
    match = re.match(r"^(?:\s*(\w+)\s*\.)?\s*(\w+)", text)
    assert _head(text) == (_NO_HEAD if match is None else match.groups())


@pytest.mark.parametrize(
    "text",
    ["ClassVar[int]", "typing.ClassVar[int]", " t . InitVar", "a. [x]", "a .b", "", "  ", "._x"],
)
def test_the_annotation_head_of_the_usual_spellings(text: str) -> None:
    match = re.match(r"^(?:\s*(\w+)\s*\.)?\s*(\w+)", text)
    assert _head(text) == (_NO_HEAD if match is None else match.groups())
