"""Standard dataclasses whose methods were written at build time: the import line's trick.

``@dataclass`` writes the source of each class's ``__init__``, ``__repr__``, ``__eq__``,
``__hash__`` and frozen setters and compiles it while the module is imported: about
0.7 ms per class on the bench machine, 30 ms for the 41 classes that
``from xds_client import XdsClient, AsyncXdsClient, Node`` defines. That is most of what
the line costs beyond grpc itself (docs/performance.md, "Prebuilt dataclass methods").

The classes of that line take :func:`dataclass` from here instead of from
:mod:`dataclasses`; the decorator has the same parameters, and what it returns is a
dataclass the standard way (``fields``, ``replace``, ``asdict``, pattern matching and
pickling work as usual). ``tools/gen_dataclasses.py`` writes the methods into
:mod:`._methods` with the :mod:`dataclasses` module itself as the judge of each
declaration, and ``--check`` keeps them current. At import the decorator compares the
class with the declaration its methods were written for (:func:`shape_of`: options,
field names, annotations, which fields have defaults, ...); when they differ, or on an
interpreter whose :mod:`dataclasses` lacks what the assembly needs, the class goes to
:func:`dataclasses.dataclass` unchanged, so a stale file costs time, never behaviour.

One difference from Python 3.10-3.12's slotted frozen classes: assigning a name that is
not a field raises :class:`~dataclasses.FrozenInstanceError`, where theirs raise
``TypeError`` from ``super()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _methods

__all__ = ["FACTORY", "Shape", "built", "dataclass", "fallbacks", "shape_of"]

Shape = tuple[Any, ...]
"""What a class's generated methods depend on; see :func:`shape_of`."""

# Names whose presence in a class body changes which methods a dataclass gets.
_SPECIAL = (
    "__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__",
    "__getstate__", "__setstate__", "__match_args__", "__slots__", "__post_init__",
)  # fmt: skip

_OPTIONS = (
    "init", "repr", "eq", "order", "unsafe_hash", "frozen", "match_args", "kw_only",
    "slots", "weakref_slot",
)  # fmt: skip


class _Factory:
    """The default of an ``__init__`` parameter whose field has a ``default_factory``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"  # what inspect.signature shows, as for the standard one


FACTORY = _Factory()

ENABLED = True
"""False while ``tools/gen_dataclasses.py`` imports the classes to write their methods."""

built: list[tuple[type, Shape]] = []
"""Every class this decorator made, with its shape (the generator reads it)."""

fallbacks: list[str] = []
"""Classes handed to :func:`dataclasses.dataclass` for want of current methods."""


def _params_class() -> type | None:
    """``dataclasses._DataclassParams`` if it can be filled by name (3.10 to 3.13)."""
    params = getattr(dataclasses, "_DataclassParams", None)
    field_type = getattr(dataclasses, "_FIELD", None)
    if params is None or field_type is None or not isinstance(vars(params).get("__slots__"), tuple):
        return None
    return params  # type: ignore[no-any-return]


_PARAMS = _params_class()


def shape_of(cls: type, options: dict[str, bool]) -> Shape:
    """Everything about a declaration that the generated methods were written for.

    The decorator's options; per field, in order: name, annotation, whether it has a
    default, a ``default_factory`` or neither, and the ``field()`` flags; which special
    names the class body defines; whether it has a docstring, a dataclass base or a
    metaclass. Default values are not part of it: the methods take them from the class.
    """
    namespace = vars(cls)
    fields = []
    for name, annotation in namespace.get("__annotations__", {}).items():
        value = namespace.get(name, dataclasses.MISSING)
        if isinstance(value, dataclasses.Field):
            if value.default_factory is not dataclasses.MISSING:
                default = "factory"
            else:
                default = "required" if value.default is dataclasses.MISSING else "value"
            kw_only = None if value.kw_only is dataclasses.MISSING else value.kw_only
            flags = (value.init, value.repr, value.hash, value.compare, kw_only)
        else:
            default = "required" if value is dataclasses.MISSING else "value"
            flags = (True, True, None, True, None)
        fields.append((name, annotation, default, *flags))
    return (
        tuple(options[name] for name in _OPTIONS),
        tuple(fields),
        tuple(name for name in _SPECIAL if name in namespace),
        bool(namespace.get("__doc__")),
        type(cls) is type,
        any(hasattr(base, "__dataclass_fields__") for base in cls.__mro__[1:]),
    )


def _assemble(cls: type, options: dict[str, bool], shape: Shape, make: Callable[..., Any]) -> type:
    """``cls`` as :func:`dataclasses.dataclass` would make it, with prebuilt methods."""
    assert _PARAMS is not None
    namespace = dict(vars(cls))
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    fields: dict[str, dataclasses.Field[Any]] = {}
    defaults: list[Any] = []
    for name, annotation, default, *_ in shape[1]:
        value = namespace.pop(name, dataclasses.MISSING)  # a slot replaces the class attribute
        if isinstance(value, dataclasses.Field):
            field = value
        elif value is dataclasses.MISSING:
            field = dataclasses.field()
        else:
            field = dataclasses.field(default=value)
        field.name = name
        field.type = annotation
        field._field_type = dataclasses._FIELD  # type: ignore[attr-defined]
        if field.kw_only is dataclasses.MISSING:
            field.kw_only = options["kw_only"]
        fields[name] = field
        if default == "value":
            defaults.append(field.default)
        elif default == "factory":
            defaults.append(field.default_factory)
    params: Any = object.__new__(_PARAMS)
    for name in vars(_PARAMS)["__slots__"]:
        setattr(params, name, options.get(name, False))
    namespace["__slots__"] = tuple(fields)
    namespace["__dataclass_fields__"] = fields
    namespace["__dataclass_params__"] = params
    if options["match_args"] and "__match_args__" not in namespace:
        namespace["__match_args__"] = tuple(
            name for name, field in fields.items() if field.init and not field.kw_only
        )
    final = type(cls)(cls.__name__, cls.__bases__, namespace)
    final.__qualname__ = cls.__qualname__
    for name, method in make(final, FACTORY, *defaults).items():
        if "<locals>" in getattr(method, "__qualname__", ""):  # made for this class
            method.__qualname__ = f"{cls.__qualname__}.{name}"
            method.__module__ = cls.__module__
        setattr(final, name, method)
    if "__init__" not in namespace:
        final.__init__.__annotations__ = {  # type: ignore[misc]
            **{name: field.type for name, field in fields.items() if field.init},
            "return": None,
        }
    return final


def _build(cls: type, options: dict[str, bool]) -> type:
    shape = shape_of(cls, options)
    entry = _methods.ENTRIES.get(f"{cls.__module__}.{cls.__qualname__}") if ENABLED else None
    if entry is None or entry[0] != shape or _PARAMS is None:
        fallbacks.append(f"{cls.__module__}.{cls.__qualname__}")
        given = {name: value for name, value in options.items() if value or name != "weakref_slot"}
        made: type = dataclasses.dataclass(cls, **given)
    else:
        made = _assemble(cls, options, shape, entry[1])
    built.append((made, shape))
    return made


if TYPE_CHECKING:
    from dataclasses import dataclass as dataclass
else:

    def dataclass(
        cls=None,
        /,
        *,
        init=True,
        repr=True,
        eq=True,
        order=False,
        unsafe_hash=False,
        frozen=False,
        match_args=True,
        kw_only=False,
        slots=False,
        weakref_slot=False,
    ):
        """:func:`dataclasses.dataclass`, with the methods written at build time."""
        options = {
            "init": init, "repr": repr, "eq": eq, "order": order,
            "unsafe_hash": unsafe_hash, "frozen": frozen, "match_args": match_args,
            "kw_only": kw_only, "slots": slots, "weakref_slot": weakref_slot,
        }  # fmt: skip

        def wrap(cls):
            return _build(cls, options)

        return wrap if cls is None else wrap(cls)
