"""Checking resources against their protos' ``(validate.rules)`` annotations.

Envoy runs protoc-gen-validate (PGV) on every resource it receives and NACKs the
ones that fail. We do the same without PGV's runtime (it reads
``FieldDescriptor.label``, gone in protobuf 7, and generates code at run time):
the options in each message's descriptor become, per message type, a function that
checks a message and raises with the failing field's path. The functions of the
standard resource types are written at build time (``tools/gen_rules.py``, into
``_rules_generated/``, one module per proto package); others are written at run time
from the same writer, their source kept in ``linecache`` for tracebacks.

This module finds each type's checker and runs it (the public API at the end); what
the rules mean is ``_rules_meanings``, how a checker is written ``_rules_writer``, the
memo of verdicts ``_rules_memo``.

Covered: numbers (const, lt/lte/gt/gte and their ranges, in, not_in,
ignore_empty), bool const, strings (lengths in characters and bytes, pattern,
prefix, suffix, contains, not_contains, in, not_in, email, hostname, ip, ipv4,
ipv6, uri, uri_ref, address, uuid, HTTP header name/value), bytes, enums
(const, defined_only, in, not_in), repeated (min/max_items, unique, items), maps
(min/max_pairs, keys, values), messages (required, skip), required oneofs,
wrapper types, durations, timestamps (lt_now/gt_now/within against the ``now``
the caller gives, never a clock), Any (required, in, not_in) and the payload of
an ``Any`` whose type is known to this process, checked by its own rules.
Messages marked ``(validate.disabled)`` or ``(validate.ignored)`` are not checked.

Cost: upb charges 0.1-1 µs for each field read, set-ness test or sub-message
touched from Python, so the generated code asks only the fields that carry a rule
at any depth, one HasField each (ListFields would build a Python object for every
set field, checked or not), and the verdicts of ``Any`` payloads and of costly
sub-messages are memoised by their bytes (bounded), as control planes repeat them
across resources. Given the bytes a resource was parsed from (``rules_verdict``'s
``data``, as the protocol cores give them), a resource that fits a shape learnt from
earlier ones is proved from them without this walk (``_shapes``). The order in
which rules are tried, hence the verdict, is the
one of the first checker (``tests/protocol/_rules_reference.py``): a differential
test holds every verdict to it.
"""

from __future__ import annotations

import hashlib
import linecache
import re
from collections.abc import Callable
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any, cast

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from xds_client.errors import RuleViolationError
from xds_client.resources import message_descriptor

from ._rules_generated import FILES as GENERATED_FILES
from ._rules_generated import TYPES as GENERATED_TYPES
from ._rules_meanings import (
    _BASE_ENV,
    _GREW,
    _NOW_SEEN,
    _PASSED,
    Check,
    _broken,
    _disabled,
    _held_rules,
    _hole_lines,
    _nothing,
    _RuleBrokenError,
    missing_envoy_rules,
)
from ._rules_memo import VerdictMemo
from ._rules_writer import TypeFacts, module_text
from ._shapes import UNKNOWN, ShapeBook, ShapeHooks

__all__ = ["check_rules", "missing_envoy_rules", "rule_violation", "rules_verdict", "validate"]

_GENERATED_PACKAGE = "xds_client.protocol._rules_generated"
_GENERATED_DIR = Path(__file__).parent / "_rules_generated"


class _NotReadyError(Exception):
    """A checker asked for while another thread builds it."""


class _UnknownTypeError(Exception):
    """An ``Any``'s type that no installed module defines (yet)."""


class _Compiler:
    """Per-type checkers, found once per process and shared by every protocol object.

    A type's checker comes from the module written for its package at build time
    (``_rules_generated/``) when that module was written from the descriptors loaded
    now, else it is written now (``_rules_writer``). ``Any`` payloads of known types
    are decoded and checked by their own type's checker, and their verdicts are
    memoised by their bytes (``_rules_memo``).
    """

    def __init__(self, *, use_generated: bool = True) -> None:
        self._holders: dict[str, list[Any]] = {}  # [check or None, built]
        self.by_class: dict[type[Any], Check | None] = {}
        self.facts = TypeFacts()
        self._any: dict[str, tuple[Callable[[bytes], Message], Check] | None] = {}
        self.memo = VerdictMemo()
        self.shapes: dict[type[Any], ShapeBook] = {}
        self.use_generated = use_generated
        self._linked: dict[tuple[str, int], dict[str, Any]] = {}

    def for_class(self, cls: type[Any]) -> Check | None:
        """The checker of messages of class ``cls`` (by class: no descriptor lookup)."""
        try:
            return self.by_class[cls]
        except KeyError:
            check, built = self.to_run(cls.DESCRIPTOR)
            if built:
                self.by_class[cls] = check
            return check

    def checker(self, desc: Descriptor) -> Check | None:
        """``check(message, ctx)`` for messages of ``desc``, or None when nothing applies
        (or while it is being built)."""
        holder = self._holders.get(desc.full_name)
        if holder is None:
            holder = self._holders[desc.full_name] = [None, False]
            holder[0] = self._compile(desc)
            holder[1] = True
        check: Check | None = holder[0]
        return check

    def built_names(self) -> dict[str, list[Any]]:
        """The types whose checker is built or being built, by full name."""
        return self._holders

    def to_run(self, desc: Descriptor) -> tuple[Check | None, bool]:
        """``(checker, shared)`` to run now: the shared one, or, while another thread
        builds it, one built for this call (never no check for want of one)."""
        check = self.checker(desc)
        if self._holders[desc.full_name][1]:
            return check, True
        return self._compile(desc), False

    def _compile(self, desc: Descriptor) -> Check | None:
        if _disabled(desc) or not self.facts.needs_check(desc):
            return None
        check = self._generated(desc)
        if check is not None:
            return check
        return self._generate_now(desc)

    def _generated(self, desc: Descriptor) -> Check | None:
        """``desc``'s checker from the modules written at build time, when they cover it
        and were written from the same descriptors as the ones loaded (else None: an
        older or newer xds-protos, a type of the application's own)."""
        if not self.use_generated:
            return None
        if desc.full_name not in GENERATED_TYPES or not _written_from(desc.file):
            return None
        module = desc.file.package.replace(".", "_")
        pool = desc.file.pool
        namespace = self._linked.get((module, id(pool)))
        if namespace is None:
            name = f"{_GENERATED_PACKAGE}.{module}"
            path = str(_GENERATED_DIR / f"{module}.py")
            # Run once per compiler, in a namespace of its own (its memo, its payload
            # types); the code object, from the bytecode cache, keeps the file's name and
            # lines, so tracebacks and coverage see the file.
            try:
                code = SourceFileLoader(name, path).get_code(name)
            except OSError:  # installed without its sources (a zip): written at run time
                return None
            if code is None:
                return None
            namespace = {"__name__": name, "__file__": path, "rt": _Linker(self, pool)}
            exec(code, namespace)
            self._linked[(module, id(pool))] = namespace
        linker: _Linker = namespace["rt"]
        if linker.pending:
            linker.keep_pending()
        check: Check | None = namespace["CHECKS"].get(desc.full_name)
        return check

    def _generate_now(self, desc: Descriptor) -> Check | None:
        """``desc``'s checker written now (a type no written module covers), its source
        kept in ``linecache`` so that a traceback shows it."""
        text, _ = module_text(self.facts, [desc])
        if not text:
            return None
        filename = f"<rules of {desc.full_name}>"
        lines = text.splitlines(True)
        n = 1  # another pool's type of that name may have other rules: another name
        while linecache.getlines(filename) not in ([], lines):
            n += 1
            filename = f"<rules of {desc.full_name} #{n}>"
        linecache.cache[filename] = (len(text), None, lines, filename)
        namespace: dict[str, Any] = {"__name__": filename, "rt": _Linker(self, desc.file.pool)}
        exec(compile(text, filename, "exec"), namespace)
        check: Check | None = namespace["CHECKS"].get(desc.full_name)
        return check

    def any_check(self, allowed: frozenset[str], banned: frozenset[str]) -> Check:
        """The check of an ``Any``: its type URL rules, then the payload's own rules."""
        payload = self.any_payload
        if not allowed and not banned:
            return payload
        text_in = "type URL must be in list [" + ", ".join(sorted(allowed)) + "]"
        text_out = "type URL must not be in list [" + ", ".join(sorted(banned)) + "]"

        def check(value: Any, ctx: list[Any]) -> None:
            type_url = value.type_url
            if allowed and type_url not in allowed:
                raise _RuleBrokenError(text_in)
            if type_url in banned:
                raise _RuleBrokenError(text_out)
            payload(value, ctx)

        return check

    def any_payload(self, value: Any, ctx: list[Any]) -> None:
        type_url = value.type_url
        try:
            known = self._any[type_url]
        except KeyError:
            try:
                known = self._any_type(type_url)
            except _NotReadyError:
                known = self._any_type_now(type_url)
            except _UnknownTypeError:
                # No installed module defines it: not ours to judge, and not remembered,
                # so that it is checked once the application loads its module.
                return
            else:
                self._any[type_url] = known
        if known is None:
            return  # a type without rules
        data = value.value
        key = (type_url, data)
        seen = self.memo.entries.get(key)
        if seen is not None:  # the same bytes were judged before, without ``now``
            if seen is _PASSED:
                return
            raise _broken(*seen)
        parse, check = known
        # Its own flags: was ``now`` used for this payload? (It is decoded here and
        # dropped: what its check adds to its arena goes with it.)
        inner_ctx = [ctx[0], False, False]
        try:
            try:
                inner = parse(data)
            except DecodeError as exc:
                raise _RuleBrokenError(f"cannot decode {type_url}: {exc}") from None
            try:
                check(inner, inner_ctx)
            except _RuleBrokenError as exc:
                exc.segments.append(f"({inner.DESCRIPTOR.full_name})")
                raise
        except _RuleBrokenError as exc:
            if inner_ctx[_NOW_SEEN]:
                ctx[_NOW_SEEN] = True
            else:
                self.memo.remember(key, (exc.reason, tuple(exc.segments)))
            raise
        if inner_ctx[_NOW_SEEN]:
            ctx[_NOW_SEEN] = True
        else:
            self.memo.remember(key, _PASSED)

    def any_types(self) -> dict[str, tuple[Callable[[bytes], Message], Check] | None]:
        """The ``Any`` payload types judged so far, by type URL (None: without rules)."""
        return self._any

    def forget(self) -> None:
        """Drop every memoised verdict, what the memos learnt of their hit rates, and
        the shapes learnt."""
        self.memo.forget()
        self.shapes.clear()

    def _any_type_now(self, type_url: str) -> tuple[Callable[[bytes], Message], Check] | None:
        desc = message_descriptor(type_url.rpartition("/")[2])
        if desc is None:
            return None
        check = self._compile(desc)
        return None if check is None else (message_factory.GetMessageClass(desc).FromString, check)

    def _any_type(self, type_url: str) -> tuple[Callable[[bytes], Message], Check] | None:
        # Through the type registry: a payload's module (HttpConnectionManager,
        # UpstreamTlsContext, ...) is imported here if the application has not.
        desc = message_descriptor(type_url.rpartition("/")[2])
        if desc is None:
            raise _UnknownTypeError
        check, built = self.to_run(desc)
        if check is None:
            return None
        if not built:
            raise _NotReadyError  # not to be kept: the shared one is not built yet
        return message_factory.GetMessageClass(desc).FromString, check


class _Linker:
    """What a module of checkers asks of the compiler that runs it (``rt`` in it)."""

    def __init__(self, compiler: _Compiler, pool: Any) -> None:
        self.compiler = compiler
        self.pool = pool
        self.pending: list[tuple[str, list[FieldDescriptor]]] = []

    def any_check(self, allowed: frozenset[str], banned: frozenset[str]) -> Check:
        return self.compiler.any_check(allowed, banned)

    def memo_ref(self, kind: str, namespace: dict[str, Any], name: str) -> tuple[Check, list[int]]:
        return self.compiler.memo.through(kind, namespace, name)

    def keep_fields(self, messages: tuple[str, ...]) -> list[FieldDescriptor]:
        """The fields of ``messages``, to be held (see :func:`module_text`); those of a
        message whose file is not loaded yet are added by :meth:`keep_pending` later."""
        kept: list[FieldDescriptor] = []
        for name in messages:
            try:
                kept += self.pool.FindMessageTypeByName(name).fields
            except KeyError:
                self.pending.append((name, kept))
        return kept

    def keep_pending(self) -> None:
        """Hold the fields of the messages whose files were loaded since."""
        waiting, self.pending = self.pending, []
        for name, held in waiting:
            try:
                held.extend(self.pool.FindMessageTypeByName(name).fields)
            except KeyError:
                self.pending.append((name, held))

    def later(self, full_name: str, namespace: dict[str, Any], key: str) -> Check:
        """The checker of ``full_name``, called as ``namespace[key]``: the built one, or
        a stub that builds it at its first call and puts it in its place (most of the
        types a resource could hold never come)."""
        compiler = self.compiler
        holder = compiler.built_names().get(full_name)
        if holder is not None and holder[1] and holder[0] is not None:
            built: Check = holder[0]
            return built
        pool = self.pool

        def first(value: Any, ctx: list[Any]) -> None:
            check, shared = compiler.to_run(pool.FindMessageTypeByName(full_name))
            if check is None:
                check = _nothing
            if shared:
                namespace[key] = check
            check(value, ctx)

        return first


def linking(namespace: dict[str, Any]) -> Any:
    """``rt`` of a module of checkers: the one its compiler put in its namespace, else
    (a module imported by hand, to read or try) one of the process's compiler."""
    given = namespace.get("rt")
    return given if given is not None else _Linker(_COMPILER, descriptor_pool.Default())


_DIGESTS: dict[tuple[int, str], bool] = {}


_PROTOBUF_FILES = "google/protobuf/"
"""protobuf's own files (``Any``, ``Duration``, ``descriptor.proto``) change with the
protobuf release, not the rules: their meaning is written in this module."""


def _written_from(file: Any) -> bool:
    """Whether ``file`` and every file it imports are the ones the written modules were
    made from (their serialized descriptors hash to ``GENERATED_FILES``'s digests)."""
    if file.name.startswith(_PROTOBUF_FILES):
        return True
    key = (id(file.pool), file.name)
    known = _DIGESTS.get(key)
    if known is None:
        want = GENERATED_FILES.get(file.name)
        known = want is not None and file_digest(file) == want
        _DIGESTS[key] = known  # a dependency cycle cannot recur: protoc forbids them
        if known:
            known = all(_written_from(dep) for dep in file.dependencies)
            _DIGESTS[key] = known
    return known


def file_digest(file: Any) -> str:
    """A short digest of a proto file's serialized descriptor."""
    return hashlib.sha256(file.serialized_pb).hexdigest()[:16]


_COMPILER = _Compiler()


def _label(desc: Descriptor) -> str:
    """``RouteConfiguration`` -> ``route configuration``, for messages."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", desc.name).lower()


def _payload_type(type_url: str) -> Any:
    """The descriptor of an ``Any`` payload the checker checks, None for a type it found
    without rules, :data:`UNKNOWN` for one it has not judged."""
    try:
        known = _COMPILER.any_types()[type_url]
    except KeyError:
        return UNKNOWN
    if known is None:
        return None
    return message_descriptor(type_url.rpartition("/")[2]) or UNKNOWN


def _shape_env() -> dict[str, Any]:
    return dict(_BASE_ENV)


_HOOKS = ShapeHooks(
    hole_lines=_hole_lines, held_rules=_held_rules, payload_type=_payload_type, env=_shape_env
)


def _learn(cls: type[Any], data: bytes) -> None:
    book = _COMPILER.shapes.get(cls)
    if book is None:
        book = _COMPILER.shapes[cls] = ShapeBook(cls.DESCRIPTOR, _HOOKS)
    book.learn(data)


def rule_violation(message: Message, now: float | None = None) -> tuple[str, str] | None:
    """``(field path, reason)`` of the first rule ``message`` breaks, or None.

    ``now`` (Unix seconds) is the current time for the timestamp rules ``lt_now``,
    ``gt_now`` and ``within``; without it those rules are not checked.
    """
    check = _COMPILER.for_class(type(message))
    if check is None:
        return None
    try:
        check(message, [now, False, False])
    except _RuleBrokenError as exc:
        return exc.path(), exc.reason
    return None


def forget_verdicts() -> None:
    """Forget the memoised verdicts (benchmarks: every repetition a first time)."""
    _COMPILER.forget()


def check_rules(message: Message, now: float | None = None) -> str | None:
    """The NACK reason for ``message`` under its ``(validate.rules)``, or None."""
    return rules_verdict(message, now)[0]


def rules_verdict(
    message: Message, now: float | None = None, data: bytes | None = None
) -> tuple[str | None, bool]:
    """:func:`check_rules`'s reason, and whether the check read a repeated or map field
    that ``message`` does not hold.

    ``data``, when given, must be the bytes ``message`` was parsed from by its own
    class: a resource that fits a shape learnt from earlier ones is then proved to
    pass from them (:mod:`._shapes`), and a resource that passes is learnt from.

    Reading one makes upb give the message an empty array in its arena, which grows by
    a block (about 370 B on a Cluster) for as long as the message lives. No test for an
    unset container is cheaper (``ListFields`` costs twice a decode), so a caller that
    keeps the message should keep a fresh decode of its bytes instead when this is true.
    """
    # rule_violation's body, written out: this runs for every resource received.
    cls = type(message)
    if data is not None:
        book = _COMPILER.shapes.get(cls)
        if book is not None and book.shapes and book.proves(data):
            return None, False
    try:
        check = _COMPILER.by_class[cls]
    except KeyError:
        check = _COMPILER.for_class(cls)
    if check is None:
        return None, False
    ctx: list[Any] = [now, False, False]
    try:
        check(message, ctx)
    except _RuleBrokenError as exc:
        path = exc.path()
        return (f"{path}: {exc.reason}" if path else exc.reason), bool(ctx[_GREW])
    if data is not None and not ctx[_NOW_SEEN]:
        _learn(cls, data)
    return None, bool(ctx[_GREW])


def validate(message: Message, *, now: float | None = None) -> None:
    """Check ``message`` against its proto's ``(validate.rules)`` (protoc-gen-validate).

    Raises :class:`~xds_client.errors.RuleViolationError` naming the message, its
    name when it has one, and the path of the first field that breaks a rule, e.g.
    ``cluster 'svc': connect_timeout: must be greater than 0s``. ``now`` is the
    current time in Unix seconds (``time.time()``) for the timestamp rules that
    compare with it (``lt_now``, ``gt_now``, ``within``); without it they are not
    checked, as this function reads no clock.
    """
    found = rule_violation(message, now)
    if found is None:
        return
    path, reason = found
    name = ""
    for field in ("name", "cluster_name"):
        fd = message.DESCRIPTOR.fields_by_name.get(field)
        if fd is not None and fd.type == FieldDescriptor.TYPE_STRING:
            name = str(getattr(message, field))
            break
    what = _label(cast("Descriptor", message.DESCRIPTOR)) + (f" {name!r}" if name else "")
    raise RuleViolationError(
        f"{what}: {path}: {reason}" if path else f"{what}: {reason}",
        path=path,
        reason=reason,
        message_type=message.DESCRIPTOR.full_name,
    )
