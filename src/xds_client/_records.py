"""``record``: a frozen dataclass whose methods are not compiled at import.

``@dataclass`` writes the source of ``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__`` and ``__delattr__`` for each class and ``exec``s
it: about 1 ms per frozen class, paid by every program that imports it, and the
client's import line loads a dozen public records. :func:`record` makes the same
class without compiling anything: the standard ``dataclass`` still processes the
fields (``fields()``, ``replace()``, ``asdict()``, ``is_dataclass()``, pattern
matching and subclassing by a real dataclass work as before), and the methods
are shared functions closed over the field list. ``__dataclass_params__`` tells
what the class does (``frozen``, ``eq``), as for a real one.

For the type checker ``record`` *is* ``dataclasses.dataclass``. A generic
``__init__`` is slower per call (a few microseconds): a record made on a hot path
keeps its own ``__init__`` in the class body (setting fields with
``object.__setattr__``), which ``record`` leaves in place as ``dataclass`` does.
``tests/test_records.py`` holds each record against the real dataclass of the
same fields.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

__all__ = ["record"]

if TYPE_CHECKING:
    from dataclasses import dataclass as record
else:

    def record(
        cls: type | None = None, /, *, frozen: bool = False, eq: bool = True, slots: bool = False
    ) -> Any:
        """``dataclasses.dataclass(frozen=..., eq=..., slots=...)`` without ``exec``."""

        def wrap(cls: type) -> type:
            return _process(cls, frozen=frozen, eq=eq, slots=slots)

        return wrap if cls is None else wrap(cls)


_MISSING = dataclasses.MISSING


def _process(cls: type, *, frozen: bool, eq: bool, slots: bool) -> type:
    own = set(cls.__dict__)
    class_hash = cls.__dict__.get("__hash__", _MISSING)
    explicit_hash = not (class_hash is _MISSING or (class_hash is None and "__eq__" in own))
    # The standard processing, with every generated method turned off: nothing is exec'd.
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=slots)
    fields = dataclasses.fields(cls)
    for f in fields:
        if getattr(f, "kw_only", False) is True:
            raise TypeError(f"record {cls.__name__}: kw_only fields are not supported")
    initvar = getattr(dataclasses, "_FIELD_INITVAR", None)
    if any(f._field_type is initvar for f in cls.__dict__["__dataclass_fields__"].values()):
        raise TypeError(f"record {cls.__name__}: InitVar fields are not supported")

    def put(name: str, value: Any) -> None:
        if name not in own:
            value.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, value)

    put("__init__", _init(cls, fields))
    put("__repr__", _repr(fields))
    if eq:
        compared = tuple(f.name for f in fields if f.compare)
        put("__eq__", _eq(compared))
        # dataclasses' rule (unsafe_hash=False): eq without frozen makes instances
        # unhashable, eq with frozen hashes the compared fields; an explicit hash stays.
        if not explicit_hash:
            hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
            cls.__hash__ = _hash(hashed) if frozen else None  # type: ignore[method-assign,assignment]
    if frozen:
        names = frozenset(f.name for f in fields)
        for name in ("__setattr__", "__delattr__"):
            if name in own:
                raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
        put("__setattr__", _frozen_setattr(cls, names))
        put("__delattr__", _frozen_delattr(cls, names))
        if slots:
            put("__getstate__", _getstate(fields))
            put("__setstate__", _setstate(fields))
    params = cls.__dict__["__dataclass_params__"]
    params.init = True
    params.repr = True
    params.eq = eq
    params.frozen = frozen
    return cls


def _init(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> Any:
    import inspect

    params = [f for f in fields if f.init]
    names = tuple(f.name for f in params)
    known = frozenset(names)
    defaults = {f.name: f.default for f in params if f.default is not _MISSING}
    factories = {f.name: f.default_factory for f in fields if f.default_factory is not _MISSING}
    unset = tuple((f.name, f.default) for f in fields if not f.init and f.default is not _MISSING)
    setter = object.__setattr__
    post_init = hasattr(cls, "__post_init__")
    owner = cls.__qualname__

    count = len(names)
    simple = not unset and not any(not f.init for f in fields) and not post_init

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        if simple and not kwargs and len(args) == count:  # every field, in order
            for name, value in zip(names, args, strict=True):
                setter(self, name, value)
            return
        if len(args) > count:
            raise TypeError(
                f"{owner}.__init__() takes {len(names) + 1} positional arguments "
                f"but {len(args) + 1} were given"
            )
        values = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in known:
                raise TypeError(f"{owner}.__init__() got an unexpected keyword argument {key!r}")
            if key in values:
                raise TypeError(f"{owner}.__init__() got multiple values for argument {key!r}")
            values[key] = value
        missing = [n for n in names if n not in values and n not in defaults and n not in factories]
        if missing:
            listed = ", ".join(repr(n) for n in missing)
            raise TypeError(
                f"{owner}.__init__() missing {len(missing)} required argument"
                f"{'s' if len(missing) > 1 else ''}: {listed}"
            )
        for name in names:
            if name in values:
                setter(self, name, values[name])
            elif name in defaults:
                setter(self, name, defaults[name])
            else:
                setter(self, name, factories[name]())
        for name, value in unset:
            setter(self, name, value)
        for f in fields:
            if not f.init and f.default_factory is not _MISSING:
                setter(self, f.name, factories[f.name]())
        if post_init:
            self.__post_init__()

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", kind)]
        + [
            inspect.Parameter(
                f.name,
                kind,
                default=f.default if f.default is not _MISSING else _factory_marker(f),
                annotation=f.type,
            )
            for f in params
        ],
        return_annotation=None,
    )
    __init__.__annotations__ = {**{f.name: f.type for f in params}, "return": None}
    return __init__


class _FactoryMarker:
    """The default shown in a signature for a ``default_factory`` field, as dataclasses does."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _FactoryMarker()


def _factory_marker(f: dataclasses.Field[Any]) -> Any:
    import inspect

    return _FACTORY if f.default_factory is not _MISSING else inspect.Parameter.empty


def _repr(fields: tuple[dataclasses.Field[Any], ...]) -> Any:
    import reprlib

    shown = tuple(f.name for f in fields if f.repr)

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:  # noqa: N807
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({inner})"

    return __repr__


def _eq(compared: tuple[str, ...]) -> Any:
    def __eq__(self: Any, other: object) -> bool:  # noqa: N807
        # Tuples, as dataclasses compares: an identical value is equal even if it is not ==.
        if other.__class__ is self.__class__:
            return tuple(getattr(self, n) for n in compared) == tuple(
                getattr(other, n) for n in compared
            )
        return NotImplemented

    return __eq__


def _hash(hashed: tuple[str, ...]) -> Any:
    def __hash__(self: Any) -> int:  # noqa: N807
        return hash(tuple(getattr(self, n) for n in hashed))

    return __hash__


def _frozen_setattr(cls: Any, names: frozenset[str]) -> Any:
    def __setattr__(self: Any, name: str, value: Any) -> None:  # noqa: N807
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _frozen_delattr(cls: Any, names: frozenset[str]) -> Any:
    def __delattr__(self: Any, name: str) -> None:  # noqa: N807
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__


def _getstate(fields: tuple[dataclasses.Field[Any], ...]) -> Any:
    def __getstate__(self: Any) -> list[Any]:  # noqa: N807
        return [getattr(self, f.name) for f in fields]

    return __getstate__


def _setstate(fields: tuple[dataclasses.Field[Any], ...]) -> Any:
    def __setstate__(self: Any, state: list[Any]) -> None:  # noqa: N807
        for f, value in zip(fields, state, strict=True):
            object.__setattr__(self, f.name, value)

    return __setstate__
