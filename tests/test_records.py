"""``record`` classes behave as the ``@dataclass`` of the same fields (issue #18).

Each public record is held against a real dataclass built from its own fields and
methods: fields, parameters, signature, repr, equality, hashing, immutability,
``replace``, ``asdict``, pickling, pattern matching and subclassing.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from envoy.config.core.v3.base_pb2 import Node as NodeProto
from hypothesis import given, settings
from hypothesis import strategies as st

import xds_client
from xds_client._records import _NO_HEAD, _head, _Lazy, record
from xds_client._records import field as record_field
from xds_client._records import replace as record_replace
from xds_client.client import Authority, Bootstrap, ConnectivityChanged
from xds_client.federation import XdstpName
from xds_client.node import Locality, Node
from xds_client.protocol import (
    CachedResource,
    ProtocolConfig,
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceErrorReported,
    ResourceRemoved,
    ResourceState,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
)
from xds_client.resources import ResourceType, UnwrappedResource
from xds_client.transport import ChannelCredentialsConfig, Keepalive, ServerTarget, StreamSpec

_MADE = frozenset(
    ["__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__",
     "__getstate__", "__setstate__", "__dataclass_fields__", "__dataclass_params__",
     "__match_args__", "__dict__", "__weakref__", "__slots__"]
)  # fmt: skip


def _reference(cls: type) -> type:
    """The real dataclass of ``cls``'s fields and hand-written methods."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields}
    ns: dict[str, Any] = {
        k: v
        for k, v in cls.__dict__.items()
        if k not in _MADE and k not in names and k != "__annotations__"
    }
    if "__repr__" in cls.__dict__ and not _from_records(cls.__dict__["__repr__"]):
        ns["__repr__"] = cls.__dict__["__repr__"]
    ns["__annotations__"] = dict(inspect.get_annotations(cls))
    for f in fields:
        ns[f.name] = dataclasses.field(
            default=f.default,
            default_factory=f.default_factory,
            init=f.init,
            repr=f.repr,
            hash=f.hash,
            compare=f.compare,
        )
    ref = type(cls.__name__, cls.__bases__, ns)
    return dataclasses.dataclass(
        frozen=params.frozen, eq=params.eq, slots="__slots__" in cls.__dict__
    )(ref)


def _from_records(function: Any) -> bool:
    code = getattr(function, "__code__", None) or getattr(
        getattr(function, "__wrapped__", None), "__code__", None
    )
    return code is not None and code.co_filename.endswith("_records.py")


_CASES: list[tuple[type, dict[str, Any], dict[str, Any]]] = [
    (Locality, {"region": "r", "zone": "z"}, {"zone": "y"}),
    (Node, {"id": "n", "cluster": "c", "locality": Locality("r"), "metadata": {"k": 1}},
     {"cluster": "d"}),
    (xds_client.Backoff, {"initial": 0.5, "maximum": 3.0}, {"jitter": 0.1}),
    (ChannelCredentialsConfig, {"ca_certificate": b"ca", "certificate_chain": b"c",
                                "private_key": b"k"}, {"server_name_override": "s"}),
    (Keepalive, {"time": 10.0}, {"timeout": 1.0}),
    (ServerTarget, {"uri": "h:1", "call_metadata": (("a", "b"),),
                    "server_features": frozenset({"x"})}, {"uri": "h:2"}),
    (StreamSpec, {"method": "/m", "delta": True, "type_urls": ("t",)}, {"delta": False}),
    (Authority, {"servers": (ServerTarget("h:1"),),
                 "client_listener_resource_name_template": "xdstp://a/x/%s"},
     {"fallback_on_reachability_only": True}),
    (Bootstrap, {"servers": (ServerTarget("h:1"),), "node": None},
     {"client_default_listener_resource_name_template": "x/%s"}),
    (ProtocolConfig, {"node": NodeProto(id="n"), "nack_code": 5}, {"validate_rules": False}),
    (ResourceType, {"type_url": "type.googleapis.com/x.Y", "module": "x",
                    "api_version": "v3"}, {"alias": "y"}),
    (UnwrappedResource, {"name": "n", "version": "1", "ttl": None, "body": None},
     {"aliases": ("a",)}),
    (XdstpName, {"authority": "a", "resource_type": "t", "id": "i",
                 "context_params": (("k", "v"),)}, {"id": "j"}),
    # the protocol's events and cache records, the client's connectivity event
    (ResourceUpdated, {"type_url": "t", "name": "n", "version": "1",
                       "resource": NodeProto(id="n")}, {"control_plane": "cp"}),
    (ResourceRemoved, {"type_url": "t", "name": "n", "reason": "deleted"},
     {"aliases": ("a",)}),
    (ResourceDoesNotExist, {"type_url": "t", "name": "n"}, {"name": "m"}),
    (ResourceErrorReported, {"type_url": "t", "name": "n", "code": 14, "message": "m"},
     {"code": 13}),
    (ResourceDeletionIgnored, {"type_url": "t", "name": "n"}, {"name": "m"}),
    (ResponseAccepted, {"type_url": "t", "version": "1", "nonce": "x"},
     {"control_plane": "cp"}),
    (ResponseRejected, {"type_url": "t", "nonce": "x", "version": "1",
                        "errors": {"n": "bad"}}, {"control_plane": "cp"}),
    (CachedResource, {"name": "n", "version": "1", "resource": NodeProto(id="n"),
                      "raw": b"", "ttl": None, "ttl_deadline": None, "last_updated": 1.0},
     {"aliases": ("a",)}),
    (ResourceState, {"type_url": "t", "name": "n", "version": "1", "status": "NACKED",
                     "last_updated": 1.0, "error": "e"}, {"failed_at": 2.0}),
    (ConnectivityChanged, {"connected": False, "server": "h:1", "type_urls": ("t",)},
     {"reason": "down"}),
]  # fmt: skip


def _mutations(target: object, field: str) -> list[Any]:
    return [
        _outcome(lambda: setattr(target, field, 1)),
        _outcome(lambda: delattr(target, field)),
        # only whether it raises: CPython's slotted frozen dataclass raises TypeError here
        # by a bug (its __setattr__ names the class from before the slots were added)
        _outcome(lambda: setattr(target, "extra", 1))[0],
    ]


def _parameters(cls: type) -> list[str]:
    # A hand-written ``__init__`` returns the string "None" (postponed annotations).
    return [str(p) for p in inspect.signature(cls).parameters.values()]


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return ("ok", call())
    except Exception as exc:
        return ("raises", type(exc))


@pytest.mark.parametrize(
    ("cls", "sample", "change"), _CASES, ids=lambda c: getattr(c, "__name__", "")
)
def test_a_record_behaves_as_its_dataclass(
    cls: type, sample: dict[str, Any], change: dict[str, Any]
) -> None:
    ref = _reference(cls)
    assert dataclasses.is_dataclass(cls)
    shape = [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash)
             for f in dataclasses.fields(cls)]  # fmt: skip
    assert shape == [
        (f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash)
        for f in dataclasses.fields(ref)
    ]
    assert repr(cls.__dataclass_params__) == repr(ref.__dataclass_params__)  # type: ignore[attr-defined]
    assert _parameters(cls) == _parameters(ref)
    # the parameters of __init__ too (record's signature is built on first read), pickled
    init, ref_init = inspect.signature(cls.__init__), inspect.signature(ref.__init__)  # type: ignore[misc]
    assert [str(p) for p in init.parameters.values()] == [
        str(p) for p in ref_init.parameters.values()
    ]
    for sig in (inspect.signature(cls), init):
        assert str(pickle.loads(pickle.dumps(sig))) == str(sig)
    assert cls.__match_args__ == ref.__match_args__  # type: ignore[attr-defined]

    a, b = cls(**sample), ref(**sample)
    assert repr(a) == repr(b)
    # positional construction gives the same object
    positional = [sample[f.name] for f in dataclasses.fields(cls) if f.name in sample]
    if list(sample) == [f.name for f in dataclasses.fields(cls)][: len(sample)]:
        assert repr(cls(*positional)) == repr(a)
    every = [getattr(a, f.name) for f in dataclasses.fields(cls)]
    assert repr(cls(*every)) == repr(ref(*every)) == repr(a)
    same, other = cls(**sample), cls(**{**sample, **change})
    ref_same, ref_other = ref(**sample), ref(**{**sample, **change})
    assert (a == same, a == other, a != other) == (b == ref_same, b == ref_other, b != ref_other)
    assert a.__eq__(object()) is NotImplemented
    hashed, ref_hashed = _outcome(lambda: hash(a)), _outcome(lambda: hash(b))
    assert hashed[0] == ref_hashed[0]
    if hashed[0] == "ok" and cls.__dataclass_params__.eq:  # type: ignore[attr-defined]
        assert hashed[1] == ref_hashed[1] == hash(same)
    first = dataclasses.fields(cls)[0].name
    assert _mutations(a, first) == _mutations(b, first)
    quick = record_replace(cls(**sample), **change)  # before anything builds the metadata
    replaced = dataclasses.replace(a, **change)
    assert type(replaced) is cls
    assert type(quick) is cls
    assert repr(quick) == repr(replaced)
    assert repr(replaced) == repr(dataclasses.replace(b, **change)) == repr(other)
    assert dataclasses.asdict(a) == dataclasses.asdict(b)
    assert dataclasses.astuple(a) == dataclasses.astuple(b)
    if not isinstance(sample.get("node"), NodeProto):
        assert repr(pickle.loads(pickle.dumps(a))) == repr(a)
    assert _outcome(cls)[0] == _outcome(ref)[0]
    make: Any = cls
    assert _outcome(lambda: make(**sample, nonsense=1)) == ("raises", TypeError)


@pytest.mark.parametrize(
    ("cls", "sample"),
    # A slotted class is not subclassed with new fields by a dataclass.
    [(cls, sample) for cls, sample, _ in _CASES if "__slots__" not in cls.__dict__],
    ids=lambda c: getattr(c, "__name__", ""),
)
def test_a_real_dataclass_can_extend_a_record(cls: type, sample: dict[str, Any]) -> None:
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    sub: Any = dataclasses.dataclass(frozen=params.frozen, eq=params.eq)(
        type("Sub", (cls,), {"__annotations__": {"extra": "int"}, "extra": 0})
    )
    made = sub(**sample, extra=2)
    assert made.extra == 2
    assert [f.name for f in dataclasses.fields(sub)][-1] == "extra"
    assert isinstance(made, cls)


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
