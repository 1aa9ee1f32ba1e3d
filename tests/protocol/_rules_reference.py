"""The ``(validate.rules)`` checker as it was before it was made faster (main at
66bde83, ``src/xds_client/protocol/_rules.py``), kept verbatim below this note as the
reference of tests/protocol/test_rules_differential.py: the optimised checker must give
every message the same verdict (None, or the same path and reason of the same first
failing rule). Do not "fix" this copy; it defines today's behaviour.
"""

from __future__ import annotations

import ipaddress
import keyword
import math
import re
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

import re2
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from validate import validate_pb2 as pgv

from xds_client.errors import RuleViolationError

# The rules Envoy's protos add to the installed descriptors: the same table for both.
from xds_client.protocol._rules_meanings import _field_rules

__all__ = ["check_rules", "rule_violation", "validate"]

Check = Callable[[Any, "float | None"], None]
"""``check(value, now)``: raises :class:`_RuleBrokenError` when ``value`` breaks a rule."""


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
            conds.append(
                (f"{_put(env, regex.match)}(v) is not None", f"must be a valid HTTP {what}")
            )
    elif kind is not None and getattr(r, kind):
        test, text = _WELL_KNOWN_STRING[kind]
        conds.append((f"{_put(env, test)}(v)", text))
    return conds


def _length_conds(r: Any, names: tuple[str, str, str], measure: str, unit: str) -> list[Cond]:
    """The exact, least and most length rules named ``names``, on ``measure`` of ``v``."""
    conds: list[Cond] = []
    for name, op, word in zip(
        names, ("==", ">=", "<="), ("", "at least ", "at most "), strict=True
    ):
        if r.HasField(name):
            n = getattr(r, name)
            conds.append((f"{measure} {op} {n}", f"length must be {word}{n} {unit}"))
    return conds


def _affix_conds(r: Any, env: dict[str, Any]) -> list[Cond]:
    conds: list[Cond] = []
    has = r.HasField
    if has("pattern"):
        regex = _pattern(r.pattern)
        if regex is not None:
            text = f"does not match regex pattern {r.pattern!r}"
            search = _put(env, regex.search)
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
"""Up to this many checked fields, a generated check asks each field (HasField); with
more it lists what the message sets (ListFields, in C), so a sparse Cluster does not pay
for its forty unset checked fields."""
_INLINE_DEPTH = 8
_INLINE_LINES = 20
"""The longest nested check written into its parent; longer ones are called (the
generated code, compiled once per process, stays small)."""
"""How deep the checks of nested messages are written into their parent's function."""


class _Compiler:
    """Per-type checkers, built once per process and shared by every protocol object.

    A checker is one generated function per message type, written the way PGV
    generates code: the checks of small nested messages are inlined into it (no
    call per sub-message), nested messages without a rule at any depth are never
    touched, set-ness is asked only of checked fields, and the failing field's path
    is built only on the way out of a failure.
    """

    def __init__(self) -> None:
        self._holders: dict[str, list[Check | None]] = {}
        self._reach: dict[str, bool] = {}
        self._checked: dict[str, int] = {}
        self.too_long: set[str] = set()  # types whose checks are called, not inlined
        self._any: dict[str, tuple[Callable[[bytes], Message], Check] | None] = {}

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

    def checker(self, desc: Descriptor) -> Check | None:
        """``check(message, now)`` for messages of ``desc``, or None when nothing applies."""
        holder = self._holders.get(desc.full_name)
        if holder is None:
            holder = self._holders[desc.full_name] = [None]
            holder[0] = self._compile(desc)
        return holder[0]

    def ref(self, desc: Descriptor) -> Check:
        """A call to ``desc``'s checker, which may still be under construction (cycles)."""
        holder = self._holders.get(desc.full_name)
        if holder is None:
            self.checker(desc)
            holder = self._holders[desc.full_name]
        built = holder[0]
        if built is not None:
            return built

        def call(value: Any, now: float | None) -> None:
            check = holder[0]
            if check is not None:
                check(value, now)

        return call

    def _compile(self, desc: Descriptor) -> Check | None:
        if _disabled(desc) or not self.needs_check(desc):
            return None
        env: dict[str, Any] = {"E": _RuleBrokenError, "broken": _broken, **_NUMBER_NAMES}
        gen = _Gen(self, env, desc)
        if self.checked_fields(desc) <= _ASK_EACH_UP_TO:
            body = gen.message(desc, 0)
        else:
            body = gen.listed(desc)
        if not body:
            return None
        return gen.define(body)

    def any_check(self, rules: Any) -> Check:
        """The check of an ``Any``: its type URL rules, then the payload's own rules."""
        allowed = frozenset(getattr(rules, "in")) if rules is not None else frozenset()
        banned = frozenset(rules.not_in) if rules is not None else frozenset()
        payload = self.any_payload
        if not allowed and not banned:
            return payload
        text_in = "type URL must be in list [" + ", ".join(sorted(allowed)) + "]"
        text_out = "type URL must not be in list [" + ", ".join(sorted(banned)) + "]"

        def check(value: Any, now: float | None) -> None:
            type_url = value.type_url
            if allowed and type_url not in allowed:
                raise _RuleBrokenError(text_in)
            if type_url in banned:
                raise _RuleBrokenError(text_out)
            payload(value, now)

        return check

    def any_payload(self, value: Any, now: float | None) -> None:
        type_url = value.type_url
        try:
            known = self._any[type_url]
        except KeyError:
            known = self._any[type_url] = self._any_type(type_url)
        if known is None:
            return  # a type this process does not know, or without rules: not ours to judge
        parse, check = known
        try:
            inner = parse(value.value)
        except DecodeError as exc:
            raise _RuleBrokenError(f"cannot decode {type_url}: {exc}") from None
        try:
            check(inner, now)
        except _RuleBrokenError as exc:
            exc.segments.append(f"({inner.DESCRIPTOR.full_name})")
            raise

    def _any_type(self, type_url: str) -> tuple[Callable[[bytes], Message], Check] | None:
        full = type_url.rpartition("/")[2]
        try:
            desc = descriptor_pool.Default().FindMessageTypeByName(full)
        except KeyError:
            return None
        check = self.checker(desc)
        if check is None:
            return None
        return message_factory.GetMessageClass(desc).FromString, check


class _Gen:
    """Writes the body of one generated check. Variables: ``m<d>`` the message at
    depth d, ``c<d>``/``i<d>``/``k<d>`` a repeated or map field of it and its index or
    key, ``v`` the scalar under test; ``now`` the caller's Unix time or None."""

    def __init__(self, compiler: _Compiler, env: dict[str, Any], root: Descriptor) -> None:
        self.c = compiler
        self.env = env
        self.inlining = [root.full_name]
        self.defs: list[str] = []  # functions defined beside the check (ListFields dispatch)
        self.fill: list[tuple[dict[Any, Check], Any, str]] = []

    def define(self, body: list[str]) -> Check:
        """Compile ``body`` as ``check(m0, now)``, with the functions it dispatches to,
        in one go."""
        check = _define("check", [*self.defs, "def check(m0, now):", *_indent(body)], self.env)
        for dispatch, fd, fname in self.fill:
            dispatch[fd] = self.env.pop(fname)
        return check

    def put(self, value: Any) -> str:
        return _put(self.env, value)

    # ---------------------------------------------------------------- whole messages

    def message(self, desc: Descriptor, depth: int) -> list[str]:
        """Lines checking message ``m<depth>`` of type ``desc``, asking each field."""
        lines: list[str] = []
        for fd in desc.fields:
            lines += self.field(fd, depth)
        return lines + self._oneofs(desc, depth)

    def listed(self, desc: Descriptor) -> list[str]:
        """Lines checking ``m0`` through the fields it sets (one function per field)."""
        dispatch: dict[Any, Check] = {}
        absent: list[str] = []
        for fd in desc.fields:
            plan = self._field(fd, 0)
            if plan is None:
                continue
            param, body, present, failure = plan
            if body:
                fname = f"field_{fd.number}"
                self.defs += [f"def {fname}({param}, now):", *_indent(_segment(body, fd.name))]
                self.fill.append((dispatch, fd, fname))
            if failure is not None:
                absent += [f"if not {present}:", f"    raise broken(*{failure})"]
        lines = absent + self._oneofs(desc, 0)
        if not self.fill:
            return lines
        return [
            "for fd, x in m0.ListFields():",
            f"    f = {self.put(dispatch.get)}(fd)",
            "    if f is not None:",
            "        f(x, now)",
            *lines,
        ]

    def _oneofs(self, desc: Descriptor, depth: int) -> list[str]:
        lines: list[str] = []
        for oneof in desc.oneofs:
            opts = oneof.GetOptions()
            if opts.HasExtension(pgv.required) and opts.Extensions[pgv.required]:
                key = self.put(("is required (set one of its fields)", [oneof.name]))
                lines += [
                    f"if m{depth}.WhichOneof({oneof.name!r}) is None:",
                    f"    raise broken(*{key})",
                ]
        return lines

    # ---------------------------------------------------------------- fields

    def field(self, fd: FieldDescriptor, depth: int) -> list[str]:
        """Lines checking field ``fd`` of ``m<depth>``, set or not."""
        plan = self._field(fd, depth)
        if plan is None:
            return []
        param, body, present, failure = plan
        checked = _segment(body, fd.name)
        lines: list[str] = []
        if checked and present.startswith(f"m{depth}.HasField("):
            lines = [f"if {present}:", f"    {param} = {_getter(f'm{depth}', fd.name)}"]
            lines += _indent(checked)
        elif checked:  # unset and empty are falsy: the failure of an unset one decides
            lines = [f"{param} = {present}", f"if {param}:", *_indent(checked)]
        if failure is not None:
            if not lines:
                return [f"if not {present}:", f"    raise broken(*{failure})"]
            lines += ["else:", f"    raise broken(*{failure})"]
        return lines

    def _field(
        self, fd: FieldDescriptor, depth: int
    ) -> tuple[str, list[str], str, str | None] | None:
        """(the variable holding the field's value, the lines checking a set value,
        the test that the field is set, the key of an unset field's failure or None)."""
        rules = _field_rules(fd)
        entry = fd.message_type
        get = _getter(f"m{depth}", fd.name)
        if fd.is_repeated:
            param = f"c{depth}"
            if entry is not None and entry.GetOptions().map_entry:
                body, failure = self._map(fd, rules, depth)
            else:
                body, failure = self._repeated(fd, rules, depth)
            if not body and failure is None:
                return None
            return param, body, get, failure
        if entry is None:  # a scalar
            kind = rules.WhichOneof("type") if rules is not None else None
            conds, ignore_empty = _scalar_conds(kind, fd, rules, self.env)
            body = _cond_lines(conds, self.env, ignore_empty)
            if not body:
                return None
            if fd.has_presence:
                return "v", body, f"m{depth}.HasField({fd.name!r})", None
            failure = None
            if not ignore_empty:
                found = _rejects(conds, self.env, fd.default_value)
                failure = None if found is None else self.put((found, [fd.name]))
            return "v", body, get, failure
        param = f"m{depth + 1}"
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
        return param, body, f"m{depth}.HasField({fd.name!r})", failure

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
            conds = _ordered(r, _nanos, _fmt_timestamp, self.env) + _now_conds(r)
            body = _cond_lines(conds, self.env)
            return [f"v = {m}.seconds * 1000000000 + {m}.nanos", *body] if body else []
        if full == "google.protobuf.Any":
            check = self.c.any_check(rules.any if kind == "any" else None)
            return [f"{self.put(check)}({m}, now)"]
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
        return [f"{self.put(self.c.ref(desc))}({m}, now)"]

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
            lines += [
                f"for i{depth}, {var} in enumerate(c{depth}):",
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
        _, key = self._items(key_fd, None, key_rules, depth)
        value_rules = r.values if r is not None and r.HasField("values") else None
        var, value = self._items(value_fd, value_fd.message_type, value_rules, depth)
        conds: list[Cond] = []
        ignore_empty = False
        if r is not None:
            ignore_empty = r.ignore_empty
            conds += self._counts(r, "pairs", "pair", depth)
        lines = _cond_lines(conds, self.env)
        if key or value:
            body = ([f"v = k{depth}", *key] if key else []) + value
            if value:  # keys only otherwise: a map's items() is a Python-level view
                body = [f"{var} = c{depth}[k{depth}]", *body]
            lines += [
                f"for k{depth} in c{depth}:",
                *_indent(_segment(body, f"f'[{{k{depth}!r}}]'", literal=False)),
            ]
        failure = None if ignore_empty else self._empty_failure(conds, fd.name, depth)
        return lines, failure


def _lower_bound_only(r: Any) -> int | None:
    """The bound in nanoseconds of DurationRules with only ``gt`` or ``gte``, else None."""
    fields = [fd.name for fd, _ in r.ListFields() if fd.name != "required"]
    if len(fields) == 1 and fields[0] in ("gt", "gte"):
        return _nanos(getattr(r, fields[0]))
    return None


def _getter(message: str, name: str) -> str:
    return f"getattr({message}, {name!r})" if keyword.iskeyword(name) else f"{message}.{name}"


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


def _put(env: dict[str, Any], value: Any) -> str:
    """Store ``value`` in the generated code's namespace; the name to use for it."""
    key = f"K{len(env)}"
    env[key] = value
    return key


def _define(label: str, lines: list[str], env: dict[str, Any]) -> Check:
    """Run the generated ``lines`` in ``env``; the function named ``check`` they define."""
    exec(compile("\n".join(lines) + "\n", f"<{label}>", "exec"), env)
    check: Check = env.pop("check")
    return check


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


_COMPILER = _Compiler()


def _label(desc: Descriptor) -> str:
    """``RouteConfiguration`` -> ``route configuration``, for messages."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", desc.name).lower()


def rule_violation(message: Message, now: float | None = None) -> tuple[str, str] | None:
    """``(field path, reason)`` of the first rule ``message`` breaks, or None.

    ``now`` (Unix seconds) is the current time for the timestamp rules ``lt_now``,
    ``gt_now`` and ``within``; without it those rules are not checked.
    """
    check = _COMPILER.checker(cast("Descriptor", message.DESCRIPTOR))
    if check is None:
        return None
    try:
        check(message, now)
    except _RuleBrokenError as exc:
        return exc.path(), exc.reason
    return None


def check_rules(message: Message, now: float | None = None) -> str | None:
    """The NACK reason for ``message`` under its ``(validate.rules)``, or None."""
    found = rule_violation(message, now)
    if found is None:
        return None
    path, reason = found
    return f"{path}: {reason}" if path else reason


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
