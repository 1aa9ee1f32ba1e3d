"""``record``: a frozen dataclass whose methods are not compiled at import.

Transitional (#32): every value type is a standard dataclass now; this module stays
only while ``client/_session.py`` (being split on another branch) imports ``Value``
and ``replace`` from it. Delete it, and ``tests/test_records.py``, with that import.

``@dataclass`` writes the source of ``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__`` and ``__delattr__`` for each class and ``exec``s
it: about 1 ms per frozen class, paid by every program that imports it, and the
client's import line loads a dozen public records. :func:`record` makes the same
class without compiling anything and without importing ``dataclasses``: it reads
the fields the way ``dataclasses`` does, the methods are shared functions closed
over the field list, and ``__dataclass_fields__`` / ``__dataclass_params__`` are
built by the real ``dataclasses`` on first access (``fields()``, ``asdict()``,
``is_dataclass()``, a dataclass subclass), so those work as before. A class that
needs more of ``dataclasses`` (a dataclass base, ``ClassVar``, ``InitVar``,
``KW_ONLY``, a non-string annotation) is processed by it first, then given the
same methods.

For the type checker ``record`` *is* ``dataclasses.dataclass``. A generic
``__init__`` is slower per call (a few microseconds): a record made on a hot path
keeps its own ``__init__`` in the class body (setting fields with
``object.__setattr__``), which ``record`` leaves in place as ``dataclass`` does.
``tests/test_records.py`` holds each record against the real dataclass of the
same fields.
"""

from __future__ import annotations

import sys
from _thread import get_ident
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = ["Value", "field", "record", "replace"]


class _MissingType:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _MissingType()


if TYPE_CHECKING:
    from dataclasses import dataclass as record
    from dataclasses import field, replace
else:

    def record(
        cls: type | None = None, /, *, frozen: bool = False, eq: bool = True, slots: bool = False
    ) -> Any:
        """``dataclasses.dataclass(frozen=..., eq=..., slots=...)`` without ``exec``."""

        def wrap(cls: type) -> type:
            return _process(cls, frozen=frozen, eq=eq, slots=slots)

        return wrap if cls is None else wrap(cls)

    def field(
        *,
        default: Any = _MISSING,
        default_factory: Any = _MISSING,
        init: bool = True,
        repr: bool = True,
        hash: bool | None = None,
        compare: bool = True,
    ) -> Any:
        """``dataclasses.field(...)`` for a record (``dataclasses`` is not imported)."""
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        return _Spec("", None, default, default_factory, init, repr, hash, compare)

    def replace(obj: Any, /, **changes: Any) -> Any:
        """``dataclasses.replace``: for a record whose ``__dataclass_fields__`` nobody
        asked for yet, the same steps without loading ``dataclasses``."""
        fields = _record_fields(type(obj))
        if fields is None:
            import dataclasses

            return dataclasses.replace(obj, **changes)
        for f in fields:
            if not f.init:
                if f.name in changes:
                    raise ValueError(
                        f"field {f.name} is declared with init=False, "
                        "it cannot be specified with replace()"
                    )
                continue
            if f.name not in changes:
                changes[f.name] = getattr(obj, f.name)
        return obj.__class__(**changes)


class _Spec:
    """What a record needs of one field (a ``dataclasses.Field``'s public attributes)."""

    __slots__ = ("compare", "default", "default_factory", "hash", "init", "name", "repr", "type")

    def __init__(  # noqa: PLR0917 - a Field's attributes, in its order
        self,
        name: str,
        type: Any,
        default: Any,
        default_factory: Any,
        init: bool,
        repr: bool,
        hash: bool | None,
        compare: bool,
    ) -> None:
        self.name = name
        self.type = type
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.hash = hash
        self.compare = compare

    def options(self) -> dict[str, Any]:
        """The arguments of ``dataclasses.field`` that make the same field."""
        out: dict[str, Any] = {
            "init": self.init, "repr": self.repr, "hash": self.hash, "compare": self.compare
        }  # fmt: skip
        if self.default is not _MISSING:
            out["default"] = self.default
        if self.default_factory is not _MISSING:
            out["default_factory"] = self.default_factory
        return out


# dataclasses' test of an annotation string for ClassVar, InitVar and KW_ONLY matches
# ``^(?:\s*(\w+)\s*\.)?\s*(\w+)``: _head does the same without compiling a regular
# expression at import (about 0.5 M instructions).
_SPECIAL = frozenset(["ClassVar", "InitVar", "KW_ONLY"])
_HEADS: dict[str, tuple[str | None, str]] = {}  # annotation -> _HEAD's groups (or _NO_HEAD)
_NO_HEAD: tuple[str | None, str] = (None, "")


def _head(text: str) -> tuple[str | None, str]:
    r"""The groups of ``^(?:\s*(\w+)\s*\.)?\s*(\w+)`` matched on ``text``, or
    :data:`_NO_HEAD` when it does not match (``\s`` is ``str.isspace``, ``\w`` is
    ``str.isalnum`` or ``_``, as in ``re`` for ``str`` patterns)."""
    n = len(text)
    start = _skip_space(text, 0, n)
    end = _word_end(text, start, n)
    if end == start:
        return _NO_HEAD
    dot = _skip_space(text, end, n)
    if dot < n and text[dot] == ".":
        begin = _skip_space(text, dot + 1, n)
        stop = _word_end(text, begin, n)
        if stop > begin:
            return text[start:end], text[begin:stop]
    return None, text[start:end]


def _skip_space(text: str, i: int, n: int) -> int:
    while i < n and text[i].isspace():
        i += 1
    return i


def _word_end(text: str, i: int, n: int) -> int:
    while i < n and (text[i].isalnum() or text[i] == "_"):
        i += 1
    return i


def _is_special(annotation: Any, namespace: dict[str, Any]) -> bool:
    """Whether ``dataclasses`` could take this annotation for a pseudo-field (``ClassVar``,
    ``InitVar``, ``KW_ONLY``): the class then goes through ``dataclasses`` itself. Errs
    on the side of yes (its own test looks up the annotation's first name the same way)."""
    if not isinstance(annotation, str):
        return True
    head = _HEADS.get(annotation)
    if head is None:
        head = _head(annotation)
        if len(_HEADS) < 512:  # annotation strings repeat across a program's records
            _HEADS[annotation] = head
    if head is _NO_HEAD:
        return False
    qualifier, name = head
    if name in _SPECIAL:
        return True
    if qualifier is not None:
        module = namespace.get(qualifier)
        return getattr(module, "__name__", None) in ("typing", "dataclasses")
    found = namespace.get(name)
    if found is None:
        return False
    classvar = sys.modules["typing"].ClassVar
    return (
        found is classvar
        or getattr(found, "__origin__", None) is classvar
        or getattr(found, "__module__", None) == "dataclasses"
        or type(found).__module__ == "dataclasses"
    )


def _field_types() -> tuple[type, ...]:
    """What a field() in a class body can be: this module's, and ``dataclasses``' once loaded."""
    loaded = sys.modules.get("dataclasses")
    return (_Spec,) if loaded is None else (_Spec, loaded.Field)


def _specs(cls: type) -> list[_Spec] | None:
    """The fields of ``cls`` as ``dataclasses`` would find them, or None when the class
    needs ``dataclasses`` itself (a dataclass base, a pseudo-field, a non-string annotation)."""
    for base in cls.__mro__[1:]:
        if "__dataclass_fields__" in base.__dict__:
            return None
    module = sys.modules.get(cls.__module__)
    namespace = module.__dict__ if module is not None else {}
    annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - as dataclasses reads them
    specs = []
    kinds = _field_types()
    for name, annotation in annotations.items():
        if _is_special(annotation, namespace):
            return None
        value = cls.__dict__.get(name, _MISSING)
        if type(value) is _Spec:
            spec = _Spec(name, annotation, value.default, value.default_factory, value.init,
                         value.repr, value.hash, value.compare)  # fmt: skip
        elif type(value) in kinds:  # a dataclasses.field(): dataclasses is loaded already
            if value.kw_only is True or value.metadata:
                return None
            missing = sys.modules["dataclasses"].MISSING
            spec = _Spec(
                name, annotation, _MISSING if value.default is missing else value.default,
                _MISSING if value.default_factory is missing else value.default_factory,
                value.init, value.repr, value.hash, value.compare,
            )  # fmt: skip
        else:
            spec = _Spec(name, annotation, value, _MISSING, True, True, None, True)
        if spec.default is not _MISSING and type(spec.default).__hash__ is None:
            raise ValueError(
                f"mutable default {type(spec.default)} for field {name} is not allowed: "
                "use default_factory"
            )
        specs.append(spec)
    for name, value in cls.__dict__.items():
        if type(value) in kinds and name not in annotations:
            raise TypeError(f"{name!r} is a field but has no type annotation")
    seen_default = False
    for spec in specs:
        if not spec.init:
            continue
        if spec.default is not _MISSING or spec.default_factory is not _MISSING:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {spec.name!r} follows default argument")
    return specs


def _process(cls: type, *, frozen: bool, eq: bool, slots: bool) -> type:
    specs = _specs(cls)
    if specs is None:
        return _process_with_dataclasses(cls, frozen=frozen, eq=eq, slots=slots)
    own = set(cls.__dict__)
    class_hash = cls.__dict__.get("__hash__", _MISSING)
    explicit_hash = not (class_hash is _MISSING or (class_hash is None and "__eq__" in own))
    # What dataclasses does to the class attributes: a field() becomes its default.
    kinds = _field_types()
    for spec in specs:
        if type(cls.__dict__.get(spec.name)) in kinds:
            if spec.default is _MISSING:
                delattr(cls, spec.name)
            else:
                setattr(cls, spec.name, spec.default)
    fields = tuple(specs)
    final: list[type] = []  # the class the methods belong to (a new one with slots)
    made = _methods(cls, fields, own, final, frozen=frozen, eq=eq, slots=slots,
                    explicit_hash=explicit_hash)  # fmt: skip
    metadata = _Metadata(cls, fields, frozen=frozen, eq=eq, slots=slots)
    made["__dataclass_fields__"] = _Lazy(metadata, 0)
    made["__dataclass_params__"] = _Lazy(metadata, 1)
    if "__match_args__" not in own:
        made["__match_args__"] = tuple([f.name for f in fields if f.init])
    if slots:
        # In the new class's namespace: setting a special method on a made class
        # updates its type slots one by one, about as costly as making it.
        cls = _add_slots(cls, fields, made)
    else:
        for name, value in made.items():
            setattr(cls, name, value)
    final.append(cls)
    metadata.cls = cls
    if not cls.__doc__:
        import inspect

        try:
            text = str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            text = ""
        cls.__doc__ = cls.__name__ + text
    if "__abstractmethods__" in cls.__dict__:  # an ABC (hasattr: an error made and dropped)
        import abc

        abc.update_abstractmethods(cls)
    return cls


def _add_slots(cls: type, fields: tuple[_Spec, ...], made: dict[str, Any]) -> type:
    """The class again with ``__slots__`` for the fields, as ``dataclass(slots=True)`` makes
    it, and with the ``made`` attributes."""
    if "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__} already specifies __slots__")
    namespace = dict(cls.__dict__)
    namespace.update(made)
    names = tuple([f.name for f in fields])
    inherited: set[str] = set()
    for base in cls.__mro__[1:-1]:
        declared = base.__dict__.get("__slots__")
        if declared is None:
            continue
        inherited.update((declared,) if isinstance(declared, str) else declared)
    namespace["__slots__"] = tuple([n for n in names if n not in inherited])
    for name in names:
        namespace.pop(name, None)
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    qualname = getattr(cls, "__qualname__", None)
    new: type = type(cls)(cls.__name__, cls.__bases__, namespace)
    if qualname is not None:
        new.__qualname__ = qualname
    return new


def _methods(
    cls: type,
    fields: tuple[_Spec, ...],
    own: set[str],
    final: list[type],
    *,
    frozen: bool,
    eq: bool,
    slots: bool,
    explicit_hash: bool,
) -> dict[str, Any]:
    """The attributes ``dataclass`` would add to ``cls`` (``final`` will hold the class)."""
    made: dict[str, Any] = {}

    def put(name: str, value: Any) -> None:
        if name not in own:
            value.__qualname__ = f"{cls.__qualname__}.{name}"
            made[name] = value

    put("__init__", _init(cls, fields))
    put("__repr__", _repr(fields))
    if eq:
        compared = tuple([f.name for f in fields if f.compare])
        put("__eq__", _eq(compared))
        # dataclasses' rule (unsafe_hash=False): eq without frozen makes instances
        # unhashable, eq with frozen hashes the compared fields; an explicit hash stays.
        if not explicit_hash:
            hashed = tuple([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
            made["__hash__"] = _hash(hashed) if frozen else None
    if frozen:
        names = frozenset([f.name for f in fields])
        for name in ("__setattr__", "__delattr__"):
            if name in own:
                raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
        put("__setattr__", _frozen_setattr(final, names))
        put("__delattr__", _frozen_delattr(final, names))
        if slots:
            put("__getstate__", _getstate(fields))
            put("__setstate__", _setstate(fields))
    return made


class _Metadata:
    """``__dataclass_fields__`` and ``__dataclass_params__`` of a record, made by
    ``dataclasses`` on first use (``fields()``, ``replace()``, ``asdict()``, a
    subclass that is a dataclass), so importing a record does not load it."""

    __slots__ = ("cls", "eq", "fields", "frozen", "made", "slots")

    def __init__(
        self, cls: type, fields: tuple[_Spec, ...], *, frozen: bool, eq: bool, slots: bool
    ) -> None:
        self.cls = cls
        self.fields = fields
        self.frozen = frozen
        self.eq = eq
        self.slots = slots
        self.made: tuple[Any, Any] | None = None

    def get(self) -> tuple[Any, Any]:
        made = self.made
        if made is None:
            import dataclasses

            cls = self.cls
            namespace: dict[str, Any] = {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__annotations__": {f.name: f.type for f in self.fields},
            }
            for f in self.fields:
                namespace[f.name] = dataclasses.field(**f.options())
            twin: Any = dataclasses.dataclass(init=False, repr=False, eq=False)(
                type(cls.__name__, (), namespace)
            )
            params = twin.__dataclass_params__
            params.init = True
            params.repr = True
            params.eq = self.eq
            params.frozen = self.frozen
            if hasattr(params, "slots"):
                params.slots = self.slots
            made = self.made = (twin.__dataclass_fields__, params)
            # From now on plain class attributes, as on a dataclass.
            type.__setattr__(cls, "__dataclass_fields__", made[0])
            type.__setattr__(cls, "__dataclass_params__", made[1])
        return made


def _record_fields(cls: type) -> tuple[_Spec, ...] | None:
    """The fields of a record made without ``dataclasses`` whose metadata is not built."""
    for klass in cls.__mro__:
        value = klass.__dict__.get("__dataclass_fields__")
        if value is not None:
            return value.metadata.fields if type(value) is _Lazy else None
    return None


class _Lazy:
    """A class attribute computed by :class:`_Metadata` on first access."""

    __slots__ = ("index", "metadata")

    def __init__(self, metadata: _Metadata, index: int) -> None:
        self.metadata = metadata
        self.index = index

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return self.metadata.get()[self.index]


def _process_with_dataclasses(cls: type, *, frozen: bool, eq: bool, slots: bool) -> type:
    """The first ``record``: ``dataclasses`` processes the fields, then the same methods."""
    import dataclasses

    own = set(cls.__dict__)
    class_hash = cls.__dict__.get("__hash__", _MISSING)
    explicit_hash = not (class_hash is _MISSING or (class_hash is None and "__eq__" in own))
    for name, value in list(cls.__dict__.items()):
        if type(value) is _Spec:  # this module's field(): the real one for dataclasses
            setattr(cls, name, dataclasses.field(**value.options()))
    # The standard processing, with every generated method turned off: nothing is exec'd.
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=slots)
    for f in dataclasses.fields(cls):
        if getattr(f, "kw_only", False) is True:
            raise TypeError(f"record {cls.__name__}: kw_only fields are not supported")
    initvar = getattr(dataclasses, "_FIELD_INITVAR", None)
    if any(f._field_type is initvar for f in cls.__dict__["__dataclass_fields__"].values()):
        raise TypeError(f"record {cls.__name__}: InitVar fields are not supported")
    missing = dataclasses.MISSING
    fields = tuple(
        _Spec(
            f.name,
            f.type,
            _MISSING if f.default is missing else f.default,
            _MISSING if f.default_factory is missing else f.default_factory,
            f.init,
            f.repr,
            f.hash,
            f.compare,
        )
        for f in dataclasses.fields(cls)
    )
    made = _methods(cls, fields, own, [cls], frozen=frozen, eq=eq, slots=slots,
                    explicit_hash=explicit_hash)  # fmt: skip
    for name, value in made.items():
        setattr(cls, name, value)
    params = cls.__dict__["__dataclass_params__"]
    params.init = True
    params.repr = True
    params.eq = eq
    params.frozen = frozen
    return cls


def _init(cls: type, fields: tuple[_Spec, ...]) -> Any:
    params: list[_Spec] = []
    defaults: dict[str, Any] = {}
    factories: dict[str, Any] = {}
    unset_list: list[tuple[str, Any]] = []
    annotations: dict[str, Any] = {}
    for f in fields:  # one pass: a record's import makes this for every class
        name, default = f.name, f.default
        if f.default_factory is not _MISSING:
            factories[name] = f.default_factory
        if f.init:
            params.append(f)
            annotations[name] = f.type
            if default is not _MISSING:
                defaults[name] = default
        elif default is not _MISSING:
            unset_list.append((name, default))
    annotations["return"] = None
    names = tuple(annotations)[:-1]
    known = frozenset(names)
    unset = tuple(unset_list)
    setter = object.__setattr__
    post_init = hasattr(cls, "__post_init__")
    owner = cls.__qualname__

    count = len(names)
    simple = count == len(fields) and not post_init

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

    __init__.__signature__ = _lazy_signature(params)  # type: ignore[attr-defined]
    __init__.__annotations__ = annotations
    return __init__


def _signature(params: list[_Spec]) -> Any:
    """The signature of a record's ``__init__``, as ``dataclasses`` would give it."""
    import inspect

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature(
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


_LazySignature: Any = None


def _lazy_signature(params: list[_Spec]) -> Any:
    """:func:`_signature`, built when ``inspect`` first reads it (a record's import then
    makes no ``Parameter``: about a quarter of what making a record cost)."""
    global _LazySignature  # noqa: PLW0603 - the class is made once, on first use
    if _LazySignature is None:
        import inspect

        slot = inspect.Signature.__dict__["_parameters"]  # the real storage

        class LazySignature(inspect.Signature):
            """An ``inspect.Signature`` whose parameters are made on first access."""

            __slots__ = ("_params",)
            _params: list[_Spec]

            def __reduce__(self) -> Any:  # a plain Signature, as dataclasses' pickles
                parameters = tuple(self.parameters.values())
                state = {"_return_annotation": self.return_annotation}
                return (inspect.Signature, (parameters,), state)

            @property
            def _parameters(self) -> Any:
                try:
                    return slot.__get__(self, inspect.Signature)
                except AttributeError:
                    made = _signature(self._params).parameters
                    slot.__set__(self, made)
                    return made

            @_parameters.setter
            def _parameters(self, value: Any) -> None:
                slot.__set__(self, value)

        _LazySignature = LazySignature
    sig = _LazySignature.__new__(_LazySignature)
    sig._params = params
    sig._return_annotation = None
    return sig


class _FactoryMarker:
    """The default shown in a signature for a ``default_factory`` field, as dataclasses does."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _FactoryMarker()


def _factory_marker(f: _Spec) -> Any:
    import inspect

    return _FACTORY if f.default_factory is not _MISSING else inspect.Parameter.empty


def _repr(fields: tuple[_Spec, ...]) -> Any:
    shown = tuple([f.name for f in fields if f.repr])
    running: set[tuple[int, int]] = set()  # what reprlib.recursive_repr keeps, per method

    def __repr__(self: Any) -> str:  # noqa: N807
        key = (id(self), get_ident())
        if key in running:
            return "..."
        running.add(key)
        try:
            inner = ", ".join([f"{name}={getattr(self, name)!r}" for name in shown])
        finally:
            running.discard(key)
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


def _frozen_setattr(final: list[Any], names: frozenset[str]) -> Any:
    def __setattr__(self: Any, name: str, value: Any) -> None:  # noqa: N807
        cls = final[0]
        if type(self) is cls or name in names:
            from dataclasses import FrozenInstanceError

            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _frozen_delattr(final: list[Any], names: frozenset[str]) -> Any:
    def __delattr__(self: Any, name: str) -> None:  # noqa: N807
        cls = final[0]
        if type(self) is cls or name in names:
            from dataclasses import FrozenInstanceError

            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__


def _getstate(fields: tuple[_Spec, ...]) -> Any:
    def __getstate__(self: Any) -> list[Any]:  # noqa: N807
        return [getattr(self, f.name) for f in fields]

    return __getstate__


def _setstate(fields: tuple[_Spec, ...]) -> Any:
    def __setstate__(self: Any, state: list[Any]) -> None:  # noqa: N807
        for f, value in zip(fields, state, strict=True):
            object.__setattr__(self, f.name, value)

    return __setstate__


class Value:
    """Base of an internal value class written out by hand (``__slots__`` and ``__init__``).

    Equality, hashing and ``repr`` come from ``_fields`` (the fields in order), as a
    frozen dataclass's would; nothing is generated or compiled when the class is made.
    """

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in self._fields])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{self.__class__.__qualname__}({inner})"
