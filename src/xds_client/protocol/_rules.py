"""Checking resources against their protos' ``(validate.rules)`` annotations.

Envoy runs protoc-gen-validate (PGV) on every resource it receives and NACKs the
ones that fail. We do the same without PGV's runtime (it reads
``FieldDescriptor.label``, gone in protobuf 7, and generates code at run time):
the options in each message's descriptor are compiled once, per message type,
into a function that checks a message and raises with the failing field's path.

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
import ipaddress
import keyword
import linecache
import math
import re
from collections.abc import Callable
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any, NamedTuple, cast
from urllib.parse import urlsplit

import re2
from google.protobuf import descriptor_pool, message_factory, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from validate import validate_pb2 as pgv

from xds_client.errors import RuleViolationError
from xds_client.resources import message_descriptor

from ._rules_generated import FILES as GENERATED_FILES
from ._rules_generated import TYPES as GENERATED_TYPES
from ._shapes import UNKNOWN, ShapeBook, ShapeHooks

_GENERATED_PACKAGE = "xds_client.protocol._rules_generated"
_GENERATED_DIR = Path(__file__).parent / "_rules_generated"

__all__ = ["check_rules", "missing_envoy_rules", "rule_violation", "rules_verdict", "validate"]

Check = Callable[[Any, list[Any]], None]
"""``check(value, ctx)``: raises :class:`_RuleBrokenError` when ``value`` breaks a rule;
``ctx`` is ``[now, now_seen, grew]``: the caller's Unix time or None, whether a rule
compared a value with it (the verdict of such a check is not memoised), and whether the
check read a repeated or map field the message does not hold (see :func:`rules_verdict`)."""


def _nothing(value: Any, ctx: list[Any]) -> None:
    """The check of a type without rules."""


class _NotReadyError(Exception):
    """A checker asked for while another thread builds it."""


class _UnknownTypeError(Exception):
    """An ``Any``'s type that no installed module defines (yet)."""


class _RuleBrokenError(Exception):
    """A failed rule; ``segments`` is the path to it, innermost first."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.segments: list[str] = []

    def path(self) -> str:
        out = ""
        for segment in reversed(self.segments):
            out += segment if not out or segment.startswith("[") else "." + segment
        return out


# ------------------------------------------------------------------ formatting


def _nanos(value: Any) -> int:  # Duration or Timestamp
    return int(value.seconds) * 1_000_000_000 + int(value.nanos)


def _fmt_duration(nanos: int) -> str:
    sign = "-" if nanos < 0 else ""
    seconds, rest = divmod(abs(nanos), 1_000_000_000)
    if not rest:
        return f"{sign}{seconds}s"
    return f"{sign}{seconds}.{rest:09d}".rstrip("0") + "s"


def _fmt_timestamp(nanos: int) -> str:
    return f"{_fmt_duration(nanos)[:-1]}s since the epoch"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (str, bytes)):
        return repr(value)
    return str(value)


# ------------------------------------------------------------------ ordered values


_NUMBER_NAMES = {"inf": math.inf, "nan": math.nan}
"""What ``repr()`` of a float bound may contain, for the generated conditions."""

Cond = tuple[str, str]
"""``(python condition on v that holds when the value is valid, reason)``."""


def _ordered(
    rules: Any, convert: Callable[[Any], Any], fmt: Callable[[Any], str], env: dict[str, Any]
) -> list[Cond]:
    """Conditions of the const/lt/lte/gt/gte/in/not_in rules of numbers, durations,
    timestamps and enums (an ``in`` list is a frozenset put in ``env``)."""
    conds: list[Cond] = []
    fields = rules.DESCRIPTOR.fields_by_name

    def has(name: str) -> bool:
        return name in fields and rules.HasField(name)

    if has("const"):
        const = convert(rules.const)
        conds.append((f"v == {const!r}", f"must equal {fmt(const)}"))
    upper = (
        ("lt", convert(rules.lt))
        if has("lt")
        else ("lte", convert(rules.lte))
        if has("lte")
        else None
    )
    lower = (
        ("gt", convert(rules.gt))
        if has("gt")
        else ("gte", convert(rules.gte))
        if has("gte")
        else None
    )
    ops = {"lt": "<", "lte": "<=", "gt": ">", "gte": ">="}
    # PGV's C++ code (Envoy's) tests for the breach (``v >= lt``), so a NaN, for which
    # every comparison is false, passes a bound; floats are written the same way.
    breach = {"lt": ">=", "lte": ">", "gt": "<=", "gte": "<"}
    floating = isinstance(upper[1] if upper else lower[1] if lower else 0, float)
    if upper and lower:
        (ukind, hi), (lkind, lo) = upper, lower
        left = "(" if lkind == "gt" else "["
        right = ")" if ukind == "lt" else "]"
        above = f"v {ops[lkind]} {lo!r}"
        below = f"v {ops[ukind]} {hi!r}"
        not_above = f"v {breach[lkind]} {lo!r}"
        not_below = f"v {breach[ukind]} {hi!r}"
        if hi > lo or (hi == lo and ukind == "lte" and lkind == "gte"):
            text = f"must be inside range {left}{fmt(lo)}, {fmt(hi)}{right}"
            cond = f"not ({not_above} or {not_below})" if floating else f"{above} and {below}"
            conds.append((cond, text))
        else:  # PGV: lt below gt means "outside the range between them"
            text = f"must be outside range ({fmt(hi)}, {fmt(lo)})"
            cond = f"not ({not_above} and {not_below})" if floating else f"{above} or {below}"
            conds.append((cond, text))
    elif upper:
        kind, hi = upper
        word = "less than" if kind == "lt" else "less than or equal to"
        cond = f"not (v {breach[kind]} {hi!r})" if floating else f"v {ops[kind]} {hi!r}"
        conds.append((cond, f"must be {word} {fmt(hi)}"))
    elif lower:
        kind, lo = lower
        word = "greater than" if kind == "gt" else "greater than or equal to"
        cond = f"not (v {breach[kind]} {lo!r})" if floating else f"v {ops[kind]} {lo!r}"
        conds.append((cond, f"must be {word} {fmt(lo)}"))
    if "in" in fields and len(getattr(rules, "in")):
        allowed = frozenset(convert(x) for x in getattr(rules, "in"))
        text = "must be in list [" + ", ".join(fmt(x) for x in sorted(allowed)) + "]"
        conds.append((f"v in {_put(env, allowed)}", text))
    if "not_in" in fields and len(rules.not_in):
        banned = frozenset(convert(x) for x in rules.not_in)
        text = "must not be in list [" + ", ".join(fmt(x) for x in sorted(banned)) + "]"
        conds.append((f"v not in {_put(env, banned)}", text))
    return conds


def _now_conds(rules: Any) -> list[Cond]:
    """PGV's ``lt_now``, ``gt_now`` and ``within`` on a timestamp ``v`` (nanoseconds),
    against ``now`` (Unix seconds, given by the caller; None skips them)."""
    lt_now, gt_now = rules.lt_now, rules.gt_now
    within = _nanos(rules.within) if rules.HasField("within") else None
    now = "now * 1000000000"
    if lt_now and within is not None:
        text = f"must be less than now within {_fmt_duration(within)}"
        return [(f"now is None or {now} - {within} <= v < {now}", text)]
    if lt_now:
        return [(f"now is None or v < {now}", "must be less than now")]
    if gt_now and within is not None:
        text = f"must be greater than now within {_fmt_duration(within)}"
        return [(f"now is None or {now} < v <= {now} + {within}", text)]
    if gt_now:
        return [(f"now is None or v > {now}", "must be greater than now")]
    if within is not None:
        text = f"must be within {_fmt_duration(within)} of now"
        return [(f"now is None or {now} - {within} <= v <= {now} + {within}", text)]
    return []


# ------------------------------------------------------------------ strings and bytes

_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
# PGV's well-known regexes, as RE2 reads them: ``$`` is the end of the text (Python's
# would let a trailing newline through, hence ``\Z``), and ``+-.`` in PGV's header-name
# class is the range from '+' to '.', so it holds ',' and '-'.
_HEADER_NAME = re.compile(r":?[0-9a-zA-Z!#$%&'*+,\-.^_|~`]+\Z")
_HEADER_VALUE = re.compile(r"[^\x00-\x08\x0A-\x1F\x7F]*\Z")
_HEADER_LOOSE = re.compile(r"[^\x00\n\r]*\Z")
_REGEX_NAMES = {
    _HEADER_NAME: "rules._HEADER_NAME",
    _HEADER_VALUE: "rules._HEADER_VALUE",
    _HEADER_LOOSE: "rules._HEADER_LOOSE",
}
"""How a written module names the regexes above."""
_TOKEN = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&'*+,-.^_|~`"
"""The characters of an HTTP token (a header name), as in ``_HEADER_NAME``."""
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*\Z")


def _is_hostname(value: str) -> bool:
    host = value[:-1] if value.endswith(".") else value
    return 0 < len(host) <= 253 and all(_HOST_LABEL.match(label) for label in host.split("."))


def _is_ip(value: str, version: int | None = None) -> bool:
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return False
    return version is None or address.version == version


def _is_email(value: str) -> bool:
    if value.endswith(">") and "<" in value:
        value = value[value.index("<") + 1 : -1]
    local, at, domain = value.rpartition("@")
    return bool(at and local and len(local) <= 64 and len(value) <= 254 and _is_hostname(domain))


def _is_uri(value: str, absolute: bool) -> bool:
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    if any(c in value for c in ' \t\r\n<>"{}|\\^`'):
        return False
    return not absolute or bool(parts.scheme and _SCHEME.match(parts.scheme))


_WELL_KNOWN_STRING: dict[str, tuple[Callable[[str], bool], str]] = {
    "email": (_is_email, "must be a valid email address"),
    "hostname": (_is_hostname, "must be a valid hostname"),
    "ip": (_is_ip, "must be a valid IP address"),
    "ipv4": (lambda v: _is_ip(v, 4), "must be a valid IPv4 address"),
    "ipv6": (lambda v: _is_ip(v, 6), "must be a valid IPv6 address"),
    "uri": (lambda v: _is_uri(v, True), "must be a valid absolute URI"),
    "uri_ref": (lambda v: _is_uri(v, False), "must be a valid URI reference"),
    "address": (lambda v: _is_ip(v) or _is_hostname(v), "must be a valid hostname or IP address"),
    "uuid": (lambda v: bool(_UUID.match(v)), "must be a valid UUID"),
}


def _pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2, as PGV's C++ code (Envoy) does: RE2's syntax
    (``\\z``, ``[[:digit:]]``, ...), a partial match, ``$`` only at the end of the text."""
    try:
        return re2.compile(pattern)
    except re2.error:  # not RE2 either: not checked rather than a false NACK
        return None


def _string_conds(r: Any, env: dict[str, Any]) -> list[Cond]:
    conds: list[Cond] = []
    has = r.HasField
    if has("const"):
        conds.append((f"v == {_put(env, r.const)}", f"must equal {r.const!r}"))
    conds += _length_conds(r, ("len", "min_len", "max_len"), "len(v)", "characters")
    conds += _length_conds(r, ("len_bytes", "min_bytes", "max_bytes"), "len(v.encode())", "bytes")
    conds += _affix_conds(r, env)
    if has("not_contains"):
        conds.append(
            (f"{_put(env, r.not_contains)} not in v", f"must not contain {r.not_contains!r}")
        )
    kind = r.WhichOneof("well_known")
    if kind == "well_known_regex":
        strict = r.strict if r.HasField("strict") else True
        known = r.well_known_regex
        regex: re.Pattern[str] | None = None
        if not strict:
            regex, what = _HEADER_LOOSE, "header"
        elif known == pgv.HTTP_HEADER_NAME:
            regex, what = _HEADER_NAME, "header name"
        elif known == pgv.HTTP_HEADER_VALUE:
            regex, what = _HEADER_VALUE, "header value"
        if regex is not None:
            # Printable ASCII, or only the characters of a token, settles the common
            # case without the regex (which decides the rest, quirks included).
            fast = (
                f"(v and not v.strip({_put(env, _TOKEN)}))"
                if regex is _HEADER_NAME
                else "(v.isascii() and v.isprintable())"
            )
            match = _put(env, regex.match, _REGEX_NAMES[regex] + ".match")
            conds.append(
                (
                    f"{fast} or {match}(v) is not None",
                    f"must be a valid HTTP {what}",
                )
            )
    elif kind is not None and getattr(r, kind):
        test, text = _WELL_KNOWN_STRING[kind]
        source = f"rules._WELL_KNOWN_STRING[{kind!r}][0]"
        conds.append((f"{_put(env, test, source)}(v)", text))
    return conds


def _length_conds(r: Any, names: tuple[str, str, str], measure: str, unit: str) -> list[Cond]:
    """The exact, least and most length rules named ``names``, on ``measure`` of ``v``."""
    conds: list[Cond] = []
    for name, op, word in zip(
        names, ("==", ">=", "<="), ("", "at least ", "at most "), strict=True
    ):
        if r.HasField(name):
            n = getattr(r, name)
            condition = f"{measure} {op} {n}"
            if measure == "len(v.encode())" and op != "==":
                # A character is 1 to 4 bytes in UTF-8: the length in characters
                # settles most strings without encoding them.
                fast = f"len(v) <= {n // 4}" if op == "<=" else f"len(v) >= {n}"
                condition = f"{fast} or {condition}"
            conds.append((condition, f"length must be {word}{n} {unit}"))
    return conds


def _affix_conds(r: Any, env: dict[str, Any]) -> list[Cond]:
    conds: list[Cond] = []
    has = r.HasField
    if has("pattern"):
        regex = _pattern(r.pattern)
        if regex is not None:
            text = f"does not match regex pattern {r.pattern!r}"
            search = _put(env, regex.search, f"re2.compile({r.pattern!r}).search")
            if r.DESCRIPTOR.name == "BytesRules":
                conds.append((f"{search}(v.decode('utf-8', 'replace')) is not None", text))
            else:
                conds.append((f"{search}(v) is not None", text))
    if has("prefix"):
        conds.append((f"v.startswith({_put(env, r.prefix)})", f"does not have prefix {r.prefix!r}"))
    if has("suffix"):
        conds.append((f"v.endswith({_put(env, r.suffix)})", f"does not have suffix {r.suffix!r}"))
    if has("contains"):
        conds.append((f"{_put(env, r.contains)} in v", f"does not contain {r.contains!r}"))
    if len(getattr(r, "in")):
        allowed = frozenset(getattr(r, "in"))
        text = "must be in list [" + ", ".join(sorted(repr(x) for x in allowed)) + "]"
        conds.append((f"v in {_put(env, allowed)}", text))
    if len(r.not_in):
        banned = frozenset(r.not_in)
        text = "must not be in list [" + ", ".join(sorted(repr(x) for x in banned)) + "]"
        conds.append((f"v not in {_put(env, banned)}", text))
    return conds


def _bytes_conds(r: Any, env: dict[str, Any]) -> list[Cond]:
    conds: list[Cond] = []
    has = r.HasField
    if has("const"):
        conds.append((f"v == {_put(env, r.const)}", f"must equal {r.const!r}"))
    conds += _length_conds(r, ("len", "min_len", "max_len"), "len(v)", "bytes")
    conds += _affix_conds(r, env)
    kind = r.WhichOneof("well_known")
    if kind is not None and getattr(r, kind):
        want = {"ip": (4, 16), "ipv4": (4,), "ipv6": (16,)}[kind]
        text = f"must be a valid {kind.upper() if kind != 'ip' else 'IP'} address in bytes"
        conds.append((f"len(v) in {want!r}", text))
    return conds


_NUMBER_KINDS = frozenset(
    (
        *("float", "double", "int32", "int64", "uint32", "uint64"),
        *("sint32", "sint64", "fixed32", "fixed64", "sfixed32", "sfixed64"),
    )
)
_WRAPPERS = frozenset(
    "google.protobuf." + kind + "Value"
    for kind in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)


def _scalar_conds(
    kind: str | None, fd: FieldDescriptor, rules: Any, env: dict[str, Any]
) -> tuple[list[Cond], bool]:
    """The conditions on one scalar value ``v`` under FieldRules of kind ``kind``,
    and whether an empty value skips them (``ignore_empty``)."""
    if kind is None:
        return [], False
    r = getattr(rules, kind)
    if kind in _NUMBER_KINDS:
        return _ordered(r, lambda x: x, _fmt, env), r.ignore_empty
    if kind == "bool":
        return (
            [(f"v == {r.const!r}", f"must equal {r.const}")] if r.HasField("const") else []
        ), False
    if kind == "string":
        return _string_conds(r, env), r.ignore_empty
    if kind == "bytes":
        return _bytes_conds(r, env), r.ignore_empty
    if kind == "enum":
        conds = _ordered(r, lambda x: x, _fmt, env)  # const, in, not_in (no lt/gt in EnumRules)
        if r.defined_only and fd.enum_type is not None:
            defined = frozenset(fd.enum_type.values_by_number)
            conds.append((f"v in {_put(env, defined)}", "must be one of the defined enum values"))
        return conds, False
    return [], False


def _cond_lines(conds: list[Cond], env: dict[str, Any], ignore_empty: bool = False) -> list[str]:
    """``if not (condition): raise`` per condition, on the value in ``v``."""
    lines: list[str] = []
    for condition, reason in conds:
        lines += [f"if not ({condition}):", f"    raise broken({_put(env, reason)})"]
    if ignore_empty and lines:
        lines = ["if v:", *_indent(lines)]
    return lines


def _indent(lines: list[str], by: int = 1) -> list[str]:
    pad = "    " * by
    return [pad + line for line in lines]


def _segment(lines: list[str], segment: str, *, literal: bool = True) -> list[str]:
    """``lines`` with ``segment`` added to the path of a failure on the way out (a
    try block costs nothing when nothing fails)."""
    if not lines:
        return []
    added = repr(segment) if literal else segment
    return [
        "try:",
        *_indent(lines),
        "except E as e:",
        f"    e.segments.append({added})",
        "    raise",
    ]


# ------------------------------------------------------------------ compiling messages

_ASK_EACH_UP_TO = 8
"""The order in which a message's rules are tried (the first failing one is the verdict,
so the order is part of it). Up to this many checked fields: declaration order, an unset
field's failure at its place. With more: the set fields in field-number order, then the
failures of the unset ones in declaration order (the order of the first checker, which
listed the set fields of such messages with ListFields)."""
_INLINE_DEPTH = 8
"""How deep the checks of nested messages are written into their parent's function."""
_INLINE_LINES = 20
"""The longest nested check written into its parent; longer ones are called (the
generated code, compiled once per process, stays small)."""

_MEMO_ENTRIES = 4096
_MEMO_BYTES = 1 << 20
"""Bounds of the memo of ``Any`` payload verdicts: entries, and bytes of payload held
(a payload longer than a sixteenth of it is not kept). Past either, it starts over."""

_MEMO_FIELDS = 6
"""Sub-messages of a type with this many checked fields (or with a list of checked
messages) are looked up in the memo by their serialized bytes before being checked:
serializing a small message costs a fifth to a half of checking one such."""
_MEMO_PROBATION = 32
_MEMO_MIN_HIT_RATIO = 2
_MEMO_PAUSE = 2048
"""Each place that checks such a sub-message asks the memo ``_MEMO_PROBATION`` times;
with fewer than one hit in ``_MEMO_MIN_HIT_RATIO`` it checks the next ``_MEMO_PAUSE``
ones directly (unique sub-messages, e.g. health checks naming their own host), then
tries again."""

_NOW_SEEN = 1
"""Index of the flag in a check's context that a timestamp rule against ``now`` was
reached: such a verdict depends on ``now`` and is not memoised."""

_GREW = 2
"""Index of the flag in a check's context that an empty container was read: upb then
gave the message an empty array in its arena."""

_FLOATING = (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE)

_PASSED: tuple[str, tuple[str, ...]] = ("", ())
"""A memoised payload verdict that breaks no rule."""


class _Plan(NamedTuple):
    """How one field of a message is checked."""

    fd: FieldDescriptor
    var: str
    """The variable holding the field's value in ``body``."""
    body: list[str]
    """Lines checking a set value, adding the field's name to a failure's path."""
    has: bool
    """Set-ness is asked with HasField (messages, scalars with presence); otherwise the
    value itself is false when unset (scalars without presence, containers)."""
    failure: str | None
    """Name of the ``(reason, path)`` raised when the field is unset, or None."""


class _Compiler:
    """Per-type checkers, built once per process and shared by every protocol object.

    A checker is one generated function per message type, written the way PGV
    generates code: straight-line tests of the fields that carry a rule at any depth
    (nested messages without a rule are never touched; the member of a oneof is
    found with one WhichOneof), the checks of small nested messages inlined, and the
    failing field's path built only on the way out of a failure. ``Any`` payloads of
    known types are decoded and checked by their own type's checker, and their
    verdicts are memoised by their bytes (bounded).
    """

    def __init__(self, *, use_generated: bool = True) -> None:
        self._holders: dict[str, list[Any]] = {}  # [check or None, built]
        self.by_class: dict[type[Any], Check | None] = {}
        self._reach: dict[str, bool] = {}
        self._checked: dict[str, int] = {}
        self.too_long: set[str] = set()  # types whose checks are called, not inlined
        self._any: dict[str, tuple[Callable[[bytes], Message], Check] | None] = {}
        self._memo: dict[tuple[str, bytes], tuple[str, tuple[str, ...]]] = {}
        self._memo_bytes = 0
        self._memo_states: list[list[int]] = []
        self.shapes: dict[type[Any], ShapeBook] = {}
        self.use_generated = use_generated
        self._linked: dict[tuple[str, int], dict[str, Any]] = {}

    # A type needs a checker when it, or a type it reaches, has a rule or an Any.
    def needs_check(self, desc: Descriptor) -> bool:
        known = self._reach.get(desc.full_name)
        if known is not None:
            return known
        seen: set[str] = set()
        stack = [desc]
        found = False
        while stack:
            d = stack.pop()
            if d.full_name in seen:
                continue
            seen.add(d.full_name)
            if _disabled(d):
                continue
            if self._reach.get(d.full_name) or _own_rules(d):
                found = True
                break
            for fd in d.fields:
                if fd.message_type is not None:
                    stack.append(fd.message_type)
        self._reach[desc.full_name] = found
        return found

    def checked_fields(self, desc: Descriptor) -> int:
        """How many fields of ``desc`` may need a check (a rule, or a checked type)."""
        count = self._checked.get(desc.full_name)
        if count is None:
            count = 0
            for fd in desc.fields:
                sub = fd.message_type
                if _field_rules(fd) is not None or (sub is not None and self.needs_check(sub)):
                    count += 1
            self._checked[desc.full_name] = count
        return count

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
        if _disabled(desc) or not self.needs_check(desc):
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
            code = SourceFileLoader(name, path).get_code(name)
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
        text, _ = module_text(self, [desc])
        if not text:
            return None
        filename = f"<rules of {desc.full_name}>"
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
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
        memo = self._memo
        seen = memo.get(key)
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
                self._remember(key, (exc.reason, tuple(exc.segments)))
            raise
        if inner_ctx[_NOW_SEEN]:
            ctx[_NOW_SEEN] = True
        else:
            self._remember(key, _PASSED)

    def any_types(self) -> dict[str, tuple[Callable[[bytes], Message], Check] | None]:
        """The ``Any`` payload types judged so far, by type URL (None: without rules)."""
        return self._any

    def worth_memo(self, desc: Descriptor) -> bool:
        """Whether checking a ``desc`` costs enough more than serializing it to look its
        verdict up: many checked fields (a probe each), or a list of checked messages."""
        if self.checked_fields(desc) >= _MEMO_FIELDS:
            return True
        return any(
            fd.is_repeated
            and fd.message_type is not None
            and not fd.message_type.GetOptions().map_entry
            and self.needs_check(fd.message_type)
            for fd in desc.fields
        )

    def memo_ref(self, kind: str, env: dict[str, Any], name: str) -> tuple[Check, list[int]]:
        """``(memoised, state)``: ``desc``'s checker (``env[name]``) through the memo of
        verdicts by serialized bytes, and ``[lookups, hits, checks left without the
        memo]``, with which the memo turns itself off for a while where it does not pay
        (few repeats). The caller asks ``state[2]`` first (no extra call when off)."""
        memo = self._memo
        remember = self._remember
        state = [0, 0, 0]
        self._memo_states.append(state)

        def memoised(value: Any, ctx: list[Any]) -> None:
            key = (kind, value.SerializePartialToString())
            seen = memo.get(key)
            state[0] += 1
            if seen is not None:
                state[1] += 1
                if seen is _PASSED:
                    return
                raise _broken(*seen)
            if state[0] >= _MEMO_PROBATION:
                if state[1] * _MEMO_MIN_HIT_RATIO < state[0]:
                    state[2] = _MEMO_PAUSE
                state[0] = state[1] = 0
            inner = [ctx[0], False, False]
            try:
                env[name](value, inner)
            except _RuleBrokenError as exc:
                if inner[_NOW_SEEN]:
                    ctx[_NOW_SEEN] = True
                else:
                    remember(key, (exc.reason, tuple(exc.segments)))
                raise
            if inner[_GREW]:  # the part shares the checked message's arena
                ctx[_GREW] = True
            if inner[_NOW_SEEN]:
                ctx[_NOW_SEEN] = True
            else:
                remember(key, _PASSED)

        return memoised, state

    def forget(self) -> None:
        """Drop every memoised verdict, what the memos learnt of their hit rates, and
        the shapes learnt."""
        self._memo.clear()
        self.shapes.clear()
        self._memo_bytes = 0
        for state in self._memo_states:
            state[:] = [0, 0, 0]

    def _remember(self, key: tuple[str, bytes], verdict: tuple[str, tuple[str, ...]]) -> None:
        size = len(key[1])
        if size > _MEMO_BYTES // 16:
            return
        if len(self._memo) >= _MEMO_ENTRIES or self._memo_bytes + size > _MEMO_BYTES:
            self._memo.clear()
            self._memo_bytes = 0
        self._memo[key] = verdict
        self._memo_bytes += size

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


class _Gen:
    """Writes the body of one generated check. Variables: ``m<d>`` the message at
    depth d, ``h<d>`` its HasField, ``w<d>_<i>`` the member set in its oneof ``i``,
    ``p<d>_<n>`` whether its field ``n`` is set (when the failure of an unset field
    comes after the other fields), ``c<d>``/``i<d>``/``k<d>`` a repeated or map field of
    it and its index or key, ``v`` the scalar under test; ``ctx`` is ``[now, flag]``:
    the caller's Unix time or None, and whether a rule against it was reached."""

    def __init__(self, compiler: _Compiler, env: _Env, root: Descriptor) -> None:
        self.c = compiler
        self.env = env
        self.called: list[Descriptor] = []  # the types whose checkers this one calls
        self.inlining = [root.full_name]
        # The descriptors of the fields read, kept alive: upb makes a container of an
        # unset repeated field with its Python FieldDescriptor, which it caches only
        # while someone holds it (otherwise it makes and frees one at every read).
        self.fields: list[FieldDescriptor] = []

    def put(self, value: Any) -> str:
        return _put(self.env, value)

    # ---------------------------------------------------------------- whole messages

    def message(self, desc: Descriptor, depth: int) -> list[str]:
        """Lines checking message ``m<depth>`` of type ``desc``."""
        m = f"m{depth}"
        plans = [plan for fd in desc.fields if (plan := self._field(fd, depth)) is not None]
        listed = self.c.checked_fields(desc) > _ASK_EACH_UP_TO
        if listed:
            plans.sort(key=lambda plan: plan.fd.number)
        required = [o for o in desc.oneofs if _required_oneof(o)]
        members: dict[str, int] = {}
        for plan in plans:
            oneof = _real_oneof(plan.fd)
            if oneof is not None:
                members[oneof] = members.get(oneof, 0) + 1
        # One WhichOneof answers for every member, and for "required".
        which = {name for name, n in members.items() if n > 1}
        which |= {o.name for o in required if o.name in members}
        asks = sum(1 for p in plans if p.has and _real_oneof(p.fd) not in which)
        has = f"h{depth}" if asks > 1 else f"{m}.HasField"
        lines = [f"{has} = {m}.HasField"] if asks > 1 else []
        later: list[tuple[int, list[str]]] = []  # failures of unset fields, if listed
        asked: dict[str, str] = {}
        chain: str | None = None  # the oneof whose if/elif chain the last lines continue
        for plan in plans:
            fd = plan.fd
            checked = _segment(plan.body, fd.name)
            get = _getter(m, fd.name)
            oneof = _real_oneof(fd)
            if oneof in which:
                assert oneof is not None
                member = asked.get(oneof)
                word = "elif" if chain == oneof else "if"
                if member is None:
                    member = asked[oneof] = f"w{depth}_{len(asked)}"
                    lines.append(f"{member} = {m}.WhichOneof({oneof!r})")
                    word = "if"
                lines += [f"{word} {member} == {fd.name!r}:", f"    {plan.var} = {get}"]
                lines += _indent(checked)
                chain = oneof
                continue
            chain = None
            fail = None if plan.failure is None else f"    raise broken(*{plan.failure})"
            if plan.has:
                test = f"{has}({fd.name!r})"
                if fail is not None and listed:
                    if checked:
                        flag = f"p{depth}_{fd.number}"
                        lines += [f"{flag} = {test}", f"if {flag}:", f"    {plan.var} = {get}"]
                        lines += _indent(checked)
                        later.append((fd.index, [f"if not {flag}:", fail]))
                    else:
                        later.append((fd.index, [f"if not {test}:", fail]))
                    continue
                if checked:
                    lines += [f"if {test}:", f"    {plan.var} = {get}", *_indent(checked)]
                    if fail is not None:
                        lines += ["else:", fail]
                elif fail is not None:
                    lines += [f"if not {test}:", fail]
                continue
            # No presence: the value is false when unset. ListFields lists a float of
            # -0.0 (its bits are set), so a listed message checks it as set.
            floating = fd.cpp_type in (
                FieldDescriptor.CPPTYPE_FLOAT,
                FieldDescriptor.CPPTYPE_DOUBLE,
            )
            present = (
                f"{plan.var} or copysign(1.0, {plan.var}) < 0.0"
                if listed and floating and not fd.is_repeated
                else plan.var
            )
            if fail is not None and listed:
                if checked:
                    flag = f"p{depth}_{fd.number}"
                    lines += [f"{plan.var} = {flag} = {get}", f"if {present}:", *_indent(checked)]
                    later.append((fd.index, [f"if not {flag}:", fail]))
                else:
                    later.append((fd.index, [f"if not {get}:", fail]))
                continue
            if checked:
                lines += [f"{plan.var} = {get}", f"if {present}:", *_indent(checked)]
                if fail is not None:
                    lines += ["else:", fail]
                elif fd.is_repeated:  # an unset container, now an empty array in the arena
                    lines += ["else:", f"    ctx[{_GREW}] = True"]
            elif fail is not None:
                lines += [f"if not {get}:", fail]
        for _, failure in sorted(later):
            lines += failure
        for group in required:
            key = self.put(("is required (set one of its fields)", [group.name]))
            member = asked.get(group.name, f"{m}.WhichOneof({group.name!r})")
            lines += [f"if {member} is None:", f"    raise broken(*{key})"]
        return lines

    # ---------------------------------------------------------------- fields

    def _field(self, fd: FieldDescriptor, depth: int) -> _Plan | None:
        """How field ``fd`` of ``m<depth>`` is checked, or None if it is not."""
        rules = _field_rules(fd)
        entry = fd.message_type
        self.fields.append(fd)
        if fd.is_repeated:
            if entry is not None and entry.GetOptions().map_entry:
                body, failure = self._map(fd, rules, depth)
            else:
                body, failure = self._repeated(fd, rules, depth)
            if not body and failure is None:
                return None
            return _Plan(fd, f"c{depth}", body, False, failure)
        if entry is None:  # a scalar
            kind = rules.WhichOneof("type") if rules is not None else None
            conds, ignore_empty = _scalar_conds(kind, fd, rules, self.env)
            body = _cond_lines(conds, self.env, ignore_empty)
            if not body:
                return None
            if fd.has_presence:
                return _Plan(fd, "v", body, True, None)
            failure = None
            if not ignore_empty:
                found = _rejects(conds, self.env, fd.default_value)
                failure = None if found is None else self.put((found, [fd.name]))
            return _Plan(fd, "v", body, False, failure)
        body = self._message_value(entry, rules, depth + 1)
        required = False
        if rules is not None:
            # ``message`` sits beside the ``type`` oneof of FieldRules, not in it.
            kind = rules.WhichOneof("type")
            sub = getattr(rules, kind) if kind in ("duration", "timestamp", "any") else None
            required = bool(sub is not None and sub.required) or (
                rules.HasField("message") and rules.message.required
            )
            # A oneof member's rules run only when it is the one set (as PGV generates
            # them), so "required" on a member never fires when another is chosen.
            if fd.containing_oneof is not None:
                required = False
        if not body and not required:
            return None
        failure = self.put(("is required", [fd.name])) if required else None
        return _Plan(fd, f"m{depth + 1}", body, True, failure)

    def _message_value(self, desc: Descriptor, rules: Any, depth: int) -> list[str]:
        """Lines checking the message in ``m<depth>`` under a field's ``rules``."""
        kind = rules.WhichOneof("type") if rules is not None else None
        if rules is not None and rules.HasField("message") and rules.message.skip:
            return []
        full = desc.full_name
        m = f"m{depth}"
        if full in _WRAPPERS and kind is not None and kind != "message":
            conds, ignore_empty = _scalar_conds(kind, desc.fields_by_name["value"], rules, self.env)
            body = _cond_lines(conds, self.env, ignore_empty)
            return [f"v = {m}.value", *body] if body else []
        if full == "google.protobuf.Duration":
            if kind != "duration":
                return []
            r = rules.duration
            conds = _ordered(r, _nanos, _fmt_duration, self.env)
            lower = _lower_bound_only(r)
            if lower is not None and lower >= 0 and len(conds) == 1:
                # The common "gt: 0s": whole seconds above the bound settle it (a
                # positive duration has no negative nanos), one field read.
                (condition, reason) = conds[0]
                full_value = f"{m}.seconds * 1000000000 + {m}.nanos"
                fast = f"{m}.seconds > {lower // 1_000_000_000}"
                return [
                    f"if not ({fast} or {condition.replace('v', full_value, 1)}):",
                    f"    raise broken({self.put(reason)})",
                ]
            body = _cond_lines(conds, self.env)
            return [f"v = {m}.seconds * 1000000000 + {m}.nanos", *body] if body else []
        if full == "google.protobuf.Timestamp":
            if kind != "timestamp":
                return []
            r = rules.timestamp
            body = _cond_lines(_ordered(r, _nanos, _fmt_timestamp, self.env), self.env)
            against_now = _cond_lines(_now_conds(r), self.env)
            if against_now:  # the verdict depends on ``now``: say so, then read it
                body += [f"ctx[{_NOW_SEEN}] = True", "now = ctx[0]", *against_now]
            return [f"v = {m}.seconds * 1000000000 + {m}.nanos", *body] if body else []
        if full == "google.protobuf.Any":
            r = rules.any if kind == "any" else None
            allowed = frozenset(getattr(r, "in")) if r is not None else frozenset()
            banned = frozenset(r.not_in) if r is not None else frozenset()
            check = _put(self.env, None, f"rt.any_check({_literal(allowed)}, {_literal(banned)})")
            return [f"{check}({m}, ctx)"]
        if _disabled(desc) or not self.c.needs_check(desc):
            return []
        if (
            full not in self.inlining
            and full not in self.c.too_long
            and depth < _INLINE_DEPTH
            and self.c.checked_fields(desc) <= _ASK_EACH_UP_TO
        ):
            self.inlining.append(full)
            try:
                body = self.message(desc, depth)
            finally:
                self.inlining.pop()
            if len(body) <= _INLINE_LINES:
                return body
            self.c.too_long.add(full)
        call = self.call_of(desc)
        if not self.c.worth_memo(desc):
            return [f"{call}({m}, ctx)"]
        memoised, off = self.env.name(), self.env.name()
        self.env.sources[f"{memoised}, {off}"] = (
            f"rt.memo_ref({desc.full_name!r}, globals(), {call!r})"
        )
        return [
            f"if {off}[2]:",
            f"    {off}[2] -= 1",
            f"    {call}({m}, ctx)",
            "else:",
            f"    {memoised}({m}, ctx)",
        ]

    def call_of(self, desc: Descriptor) -> str:
        """The name of ``desc``'s checker in the generated code (see
        :meth:`_Linker.later`)."""
        key = self.env.checkers.get(desc.full_name)
        if key is None:
            key = self.env.checkers[desc.full_name] = self.env.name()
            self.env.sources[key] = f"rt.later({desc.full_name!r}, globals(), {key!r})"
        self.called.append(desc)
        return key

    def _items(
        self, fd: FieldDescriptor, desc: Descriptor | None, rules: Any, depth: int
    ) -> tuple[str, list[str]]:
        """(variable, lines) checking one item of a repeated field or one map value."""
        if desc is None:
            kind = rules.WhichOneof("type") if rules is not None else None
            conds, ignore_empty = _scalar_conds(kind, fd, rules, self.env)
            return "v", _cond_lines(conds, self.env, ignore_empty)
        return f"m{depth + 1}", self._message_value(desc, rules, depth + 1)

    def _counts(self, r: Any, suffix: str, word: str, depth: int) -> list[Cond]:
        conds: list[Cond] = []
        if r.HasField(f"min_{suffix}"):
            lo = getattr(r, f"min_{suffix}")
            conds.append((f"len(c{depth}) >= {lo}", f"must contain at least {lo} {word}(s)"))
        if r.HasField(f"max_{suffix}"):
            hi = getattr(r, f"max_{suffix}")
            conds.append((f"len(c{depth}) <= {hi}", f"must contain at most {hi} {word}(s)"))
        return conds

    def _empty_failure(self, conds: list[Cond], name: str, depth: int) -> str | None:
        """The failure of an empty container under the count ``conds``, if any."""
        found = _rejects([(c.replace(f"c{depth}", "v"), r) for c, r in conds], self.env, ())
        return None if found is None else self.put((found, [name]))

    def _repeated(
        self, fd: FieldDescriptor, rules: Any, depth: int
    ) -> tuple[list[str], str | None]:
        r = rules.repeated if rules is not None and rules.HasField("repeated") else None
        item_rules = r.items if r is not None and r.HasField("items") else None
        var, item = self._items(fd, fd.message_type, item_rules, depth)
        conds: list[Cond] = []
        ignore_empty = False
        if r is not None:
            ignore_empty = r.ignore_empty
            conds += self._counts(r, "items", "item", depth)
            if r.unique and fd.message_type is None:
                conds.append((f"len(set(c{depth})) == len(c{depth})", "must contain unique items"))
        lines = _cond_lines(conds, self.env)
        if item:
            # By index: iterating a repeated field ends in an IndexError, which costs more.
            lines += [
                f"for i{depth} in range(len(c{depth})):",
                f"    {var} = c{depth}[i{depth}]",
                *_indent(_segment(item, f"f'[{{i{depth}}}]'", literal=False)),
            ]
        failure = None if ignore_empty else self._empty_failure(conds, fd.name, depth)
        return lines, failure

    def _map(self, fd: FieldDescriptor, rules: Any, depth: int) -> tuple[list[str], str | None]:
        entry = fd.message_type
        assert entry is not None
        r = rules.map if rules is not None and rules.HasField("map") else None
        key_fd, value_fd = entry.fields_by_name["key"], entry.fields_by_name["value"]
        key_rules = r.keys if r is not None and r.HasField("keys") else None
        key_kind = key_rules.WhichOneof("type") if key_rules is not None else None
        key_conds, key_ignore_empty = _scalar_conds(key_kind, key_fd, key_rules, self.env)
        key = _cond_lines(key_conds, self.env, key_ignore_empty)
        value_rules = r.values if r is not None and r.HasField("values") else None
        var, value = self._items(value_fd, value_fd.message_type, value_rules, depth)
        conds: list[Cond] = []
        ignore_empty = False
        if r is not None:
            ignore_empty = r.ignore_empty
            conds += self._counts(r, "pairs", "pair", depth)
        lines = _cond_lines(conds, self.env)
        if (
            key
            and not value
            and not key_ignore_empty
            and key_fd.type == FieldDescriptor.TYPE_STRING
            and [condition for condition, _ in key_conds] == ["len(v) >= 1"]
        ):
            # Keys must not be empty (Metadata's filter_metadata): only "" can fail,
            # and asking for it costs less than going through the keys.
            empty_key = self.put((key_conds[0][1], ["['']"]))
            lines += [f"if '' in c{depth}:", f"    raise broken(*{empty_key})"]
        elif key or value:
            body = ([f"v = k{depth}", *key] if key else []) + value
            if value:  # keys only otherwise: a map's items() is a Python-level view
                body = [f"{var} = c{depth}[k{depth}]", *body]
            lines += [
                f"for k{depth} in c{depth}:",
                *_indent(_segment(body, f"f'[{{k{depth}!r}}]'", literal=False)),
            ]
        failure = None if ignore_empty else self._empty_failure(conds, fd.name, depth)
        return lines, failure


def _real_oneof(fd: FieldDescriptor) -> str | None:
    """The name of the oneof ``fd`` is a member of (a proto3 ``optional``'s has one
    member and no rule of its own, so it is never asked with WhichOneof)."""
    oneof = fd.containing_oneof
    return None if oneof is None else str(oneof.name)


def _required_oneof(oneof: Any) -> bool:
    opts = oneof.GetOptions()
    return bool(opts.HasExtension(pgv.required) and opts.Extensions[pgv.required])


def _lower_bound_only(r: Any) -> int | None:
    """The bound in nanoseconds of DurationRules with only ``gt`` or ``gte``, else None."""
    fields = [fd.name for fd, _ in r.ListFields() if fd.name != "required"]
    if len(fields) == 1 and fields[0] in ("gt", "gte"):
        return _nanos(getattr(r, fields[0]))
    return None


def _getter(message: str, name: str) -> str:
    return f"getattr({message}, {name!r})" if keyword.iskeyword(name) else f"{message}.{name}"


_ENVOY_RULES: dict[str, str] = {
    # Envoy 1.40's route.proto; the descriptor xds-protos 1.85 installs has no rule here.
    "envoy.config.route.v3.RouteConfiguration.vhost_header": (
        "string { well_known_regex: HTTP_HEADER_NAME strict: false }"
    ),
}
"""Rules Envoy's own protos carry and the installed descriptors may lack (they lag
Envoy's): field full name -> ``FieldRules`` in text format, used when the installed
field has none. :func:`missing_envoy_rules` lists the ones in use."""
_ENVOY_RULES_PARSED: dict[str, Any] = {}


def _field_rules(fd: FieldDescriptor) -> Any:
    """``fd``'s ``(validate.rules)``: its own, else Envoy's from ``_ENVOY_RULES``, else None."""
    opts = fd.GetOptions()
    if opts.HasExtension(pgv.rules):
        return opts.Extensions[pgv.rules]
    text = _ENVOY_RULES.get(fd.full_name)
    if text is None:
        return None
    rules = _ENVOY_RULES_PARSED.get(fd.full_name)
    if rules is None:
        rules = _ENVOY_RULES_PARSED[fd.full_name] = text_format.Parse(text, pgv.FieldRules())
    return rules


def missing_envoy_rules() -> list[str]:
    """The fields whose Envoy rule the installed descriptors lack (checked all the same,
    from ``_ENVOY_RULES``), among the types loaded in this process."""
    missing: list[str] = []
    pool = descriptor_pool.Default()
    for full_name in sorted(_ENVOY_RULES):
        message, _, field = full_name.rpartition(".")
        try:
            fd = pool.FindMessageTypeByName(message).fields_by_name.get(field)
        except KeyError:
            continue
        if fd is not None and not fd.GetOptions().HasExtension(pgv.rules):
            missing.append(full_name)
    return missing


def _disabled(desc: Descriptor) -> bool:
    opts = desc.GetOptions()
    return any(
        opts.HasExtension(ext) and opts.Extensions[ext] for ext in (pgv.disabled, pgv.ignored)
    )


def _own_rules(desc: Descriptor) -> bool:
    for oneof in desc.oneofs:
        if oneof.GetOptions().HasExtension(pgv.required):
            return True
    for fd in desc.fields:
        if _field_rules(fd) is not None:
            return True
        if fd.message_type is not None and fd.message_type.full_name == "google.protobuf.Any":
            return True
    return False


class _Env(dict[str, Any]):
    """The namespace of generated code while it is written: each value put in it, and
    the Python expression that makes it again in the written module (``sources``)."""

    def __init__(self, base: dict[str, Any]) -> None:
        super().__init__(base)
        self.sources: dict[str, str] = {}
        self.count = 0
        self.by_source: dict[str, str] = {}  # one name per expression
        self.checkers: dict[str, str] = {}  # the name of each type's checker, by full name

    def name(self) -> str:
        key = f"K{self.count}"
        self.count += 1
        return key


def _put(env: dict[str, Any], value: Any, source: str | None = None) -> str:
    """Store ``value`` in the generated code's namespace; the name to use for it.
    ``source`` is the expression that makes it in a written module (default: the
    value written as a literal)."""
    if isinstance(env, _Env):
        text = _literal(value) if source is None else source
        key = env.by_source.get(text, "")
        if key:
            return key
        key = env.by_source[text] = env.name()
        env.sources[key] = text
    else:
        key = f"K{len(env)}"
    env[key] = value
    return key


def _literal(value: Any) -> str:
    """``value`` as Python source, the same in every process (a set's items sorted)."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return repr(value)
    if isinstance(value, float):
        return repr(value)  # inf and nan are names in a written module
    if isinstance(value, tuple):
        items = [_literal(item) for item in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(item) for item in value) + "]"
    if isinstance(value, frozenset):
        if not value:
            return "frozenset()"
        items = sorted(value, key=lambda item: (type(item).__name__, repr(item)))
        return "frozenset({" + ", ".join(_literal(item) for item in items) + "})"
    raise TypeError(f"no literal for {value!r}")


_CODE: dict[str, Any] = {}


def _rejects(conds: list[Cond], env: dict[str, Any], value: Any) -> str | None:
    """The reason of the first of ``conds`` that ``value`` fails, else None."""
    for condition, reason in conds:
        code = _CODE.get(condition)
        if code is None:
            code = _CODE[condition] = compile(condition, "<condition>", "eval")
        if not eval(code, env, {"v": value, "now": None}):
            return reason
    return None


def _broken(reason: str, segments: list[str] | tuple[str, ...] = ()) -> _RuleBrokenError:
    exc = _RuleBrokenError(reason)
    exc.segments.extend(segments)
    return exc


# ------------------------------------------------------------------ written modules

_BASE_ENV: dict[str, Any] = {
    "E": _RuleBrokenError,
    "broken": _broken,
    "copysign": math.copysign,
    **_NUMBER_NAMES,
}
"""What the conditions may name besides the constants put beside them."""


def _function_name(desc: Descriptor, taken: set[str]) -> str:
    """``envoy.config.cluster.v3.Cluster.LbSubsetConfig`` -> ``check_cluster_lb_subset_config``."""
    local = desc.full_name[len(desc.file.package) + 1 :] if desc.file.package else desc.full_name
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", local)
    name = "check_" + words.replace(".", "_").lower()
    unique, n = name, 1
    while unique in taken:
        n += 1
        unique = f"{name}_{n}"
    taken.add(unique)
    return unique


def module_text(
    compiler: _Compiler, descs: list[Descriptor], preamble: str = ""
) -> tuple[str, list[Descriptor]]:
    """The Python module checking messages of ``descs`` (each that has a rule to check):
    ``check_<name>(m0, ctx)`` per type and ``CHECKS`` by full name; and the types their
    checks call. The same text is written to a file at build time
    (``tools/gen_rules.py``) and run at run time for a type no file covers. Empty when
    none of ``descs`` has a rule."""
    env = _Env(_BASE_ENV)
    functions: list[str] = []
    table: list[str] = []
    called: list[Descriptor] = []
    taken: set[str] = set()
    for desc in descs:
        if _disabled(desc) or not compiler.needs_check(desc):
            continue
        gen = _Gen(compiler, env, desc)
        body = gen.message(desc, 0)
        if not body:
            continue
        called += gen.called
        # The descriptors of the fields read, kept alive: upb makes a container of an
        # unset repeated field with its Python FieldDescriptor, which it caches only
        # while someone holds it (otherwise it makes and frees one at every read).
        messages = tuple(sorted({str(fd.containing_type.full_name) for fd in gen.fields}))  # type: ignore[union-attr]
        _put(env, None, f"rt.keep_fields({_literal(messages)})")
        name = _function_name(desc, taken)
        functions += [
            "",
            "",
            f"def {name}(m0: Any, ctx: list[Any]) -> None:",
            f'    """``{desc.full_name}``."""',
            *_indent(body),
        ]
        table.append(f"    {desc.full_name!r}: {name},")
    if not functions:
        return "", called
    constants = [f"{key} = {source}" for key, source in env.sources.items()]
    code = "\n".join([*constants, *functions])
    imports = ["from typing import Any", ""]
    used_math = [n for n in ("copysign", "inf", "nan") if re.search(rf"\b{n}\b", code)]
    if used_math:
        imports[:0] = [f"from math import {', '.join(used_math)}"]
    if "re2." in code:
        imports += ["import re2", ""]
    imports.append("from xds_client.protocol import _rules as rules")
    imports.append(
        "from xds_client.protocol._rules import _broken as broken, _RuleBrokenError as E, linking"
    )
    lines = [
        *([preamble] if preamble else []),
        *imports,
        "",
        "rt = linking(globals())",
        *constants,
        *functions,
        "",
        "",
        "CHECKS = {",
        *table,
        "}",
    ]
    return "\n".join(lines) + "\n", called


class _Linker:
    """What a module of checkers asks of the compiler that runs it (``rt`` in it)."""

    def __init__(self, compiler: _Compiler, pool: Any) -> None:
        self.compiler = compiler
        self.pool = pool
        self.pending: list[tuple[str, list[FieldDescriptor]]] = []

    def any_check(self, allowed: frozenset[str], banned: frozenset[str]) -> Check:
        return self.compiler.any_check(allowed, banned)

    def memo_ref(self, kind: str, namespace: dict[str, Any], name: str) -> tuple[Check, list[int]]:
        return self.compiler.memo_ref(kind, namespace, name)

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


# ------------------------------------------------------------------ shapes (see _shapes)

_TIME_TYPES = frozenset(("google.protobuf.Duration", "google.protobuf.Timestamp"))


def _hole_lines(
    desc: Descriptor, fd: FieldDescriptor, parent_rules: Any, env: dict[str, Any]
) -> list[str] | None:
    """Lines checking a value ``v`` of field ``fd`` of a ``desc`` held by a field with
    ``parent_rules``, as the checker checks it; None when the value may not vary in a
    shape (its rule reads more than the value: a map's keys and values, an ``Any``'s
    type URL, a duration's or timestamp's parts under rules, a repeated field's items
    that must be unique)."""
    if desc.GetOptions().map_entry:
        return None
    enum = fd.enum_type
    if enum is not None and getattr(enum, "is_closed", True):
        return None  # an unknown number goes to the unknown fields: the field is unset
    full = desc.full_name
    if full == "google.protobuf.Any":
        return [] if fd.name == "value" else None  # a value here has no rules
    parent_kind = parent_rules.WhichOneof("type") if parent_rules is not None else None
    if full in _TIME_TYPES:
        return None if parent_kind in ("duration", "timestamp") else []
    if full in _WRAPPERS:
        if parent_kind is None or parent_kind == "message":
            return []
        conds, ignore_empty = _scalar_conds(parent_kind, fd, parent_rules, env)
        return _cond_lines(conds, env, ignore_empty)
    rules = _field_rules(fd)
    if rules is None:
        return []
    if fd.is_repeated:
        r = rules.repeated if rules.HasField("repeated") else None
        if r is None:
            return []
        if r.unique:
            return None
        if not r.HasField("items"):
            return []
        rules = r.items
    conds, ignore_empty = _scalar_conds(rules.WhichOneof("type"), fd, rules, env)
    return _cond_lines(conds, env, ignore_empty)


def _held_rules(desc: Descriptor, fd: FieldDescriptor, parent_rules: Any) -> Any:
    """The rules the checker applies to the message in field ``fd`` of a ``desc`` (held
    itself by a field with ``parent_rules``): a repeated field's ``items``, a map's
    ``values``, else the field's own."""
    if desc.GetOptions().map_entry:
        if fd.name != "value" or parent_rules is None or not parent_rules.HasField("map"):
            return None
        r = parent_rules.map
        return r.values if r.HasField("values") else None
    rules = _field_rules(fd)
    if rules is None or not fd.is_repeated:
        return rules
    entry = fd.message_type
    if entry is not None and entry.GetOptions().map_entry:
        return rules  # the entries see the map's rules (their values take ``values``)
    r = rules.repeated if rules.HasField("repeated") else None
    return r.items if r is not None and r.HasField("items") else None


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
    return {"E": _RuleBrokenError, "broken": _broken, "copysign": math.copysign, **_NUMBER_NAMES}


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
