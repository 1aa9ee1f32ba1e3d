"""Checking resources against their protos' ``(validate.rules)`` annotations.

Envoy runs protoc-gen-validate (PGV) on every resource it receives and NACKs the
ones that fail. We do the same without PGV's runtime (it reads
``FieldDescriptor.label``, gone in protobuf 7, and generates code at run time):
the options in each message's descriptor are compiled once, per message type,
into a closure that checks a message and raises with the failing field's path.

Covered: numbers (const, lt/lte/gt/gte and their ranges, in, not_in,
ignore_empty), bool const, strings (lengths in characters and bytes, pattern,
prefix, suffix, contains, not_contains, in, not_in, email, hostname, ip, ipv4,
ipv6, uri, uri_ref, address, uuid, HTTP header name/value), bytes, enums
(const, defined_only, in, not_in), repeated (min/max_items, unique, items), maps
(min/max_pairs, keys, values), messages (required, skip), required oneofs,
wrapper types, durations, timestamps (not lt_now/gt_now/within, which would read
a clock), Any (required, in, not_in) and the payload of an ``Any`` whose type
is known to this process, checked by its own rules. Messages marked
``(validate.disabled)`` or ``(validate.ignored)`` are not checked.
"""

from __future__ import annotations

import ipaddress
import keyword
import math
import re
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from validate import validate_pb2 as pgv

from xds_client.errors import RuleViolationError

__all__ = ["check_rules", "rule_violation", "validate"]

Check = Callable[[Any], None]


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


def _cond(condition: str, reason: str) -> Callable[[Any], str | None]:
    """A test from a condition on ``v``; it keeps the condition for generated code."""
    holds = eval(f"lambda v: {condition}", dict(_NUMBER_NAMES))
    test: Any = lambda v: None if holds(v) else reason  # noqa: E731
    test.condition = (condition, reason)
    return cast("Callable[[Any], str | None]", test)


def _ordered(
    rules: Any, convert: Callable[[Any], Any], fmt: Callable[[Any], str]
) -> list[Callable[[Any], str | None]]:
    """Tests of the const/lt/lte/gt/gte/in/not_in rules shared by numbers, durations, timestamps."""
    tests: list[Callable[[Any], str | None]] = []

    fields = rules.DESCRIPTOR.fields_by_name

    def has(name: str) -> bool:
        return name in fields and rules.HasField(name)

    if has("const"):
        const = convert(rules.const)
        tests.append(_cond(f"v == {const!r}", f"must equal {fmt(const)}"))
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
    if upper and lower:
        (ukind, hi), (lkind, lo) = upper, lower
        left = "(" if lkind == "gt" else "["
        right = ")" if ukind == "lt" else "]"
        above = f"v {ops[lkind]} {lo!r}"
        below = f"v {ops[ukind]} {hi!r}"
        if hi > lo or (hi == lo and ukind == "lte" and lkind == "gte"):
            text = f"must be inside range {left}{fmt(lo)}, {fmt(hi)}{right}"
            tests.append(_cond(f"{above} and {below}", text))
        else:  # PGV: lt below gt means "outside the range between them"
            text = f"must be outside range ({fmt(hi)}, {fmt(lo)})"
            tests.append(_cond(f"{above} or {below}", text))
    elif upper:
        kind, hi = upper
        word = "less than" if kind == "lt" else "less than or equal to"
        tests.append(_cond(f"v {ops[kind]} {hi!r}", f"must be {word} {fmt(hi)}"))
    elif lower:
        kind, lo = lower
        word = "greater than" if kind == "gt" else "greater than or equal to"
        tests.append(_cond(f"v {ops[kind]} {lo!r}", f"must be {word} {fmt(lo)}"))
    if "in" in fields and len(getattr(rules, "in")):
        allowed = frozenset(convert(x) for x in getattr(rules, "in"))
        text = "must be in list [" + ", ".join(fmt(x) for x in sorted(allowed)) + "]"
        tests.append(lambda v: None if v in allowed else text)
    if "not_in" in fields and len(rules.not_in):
        banned = frozenset(convert(x) for x in rules.not_in)
        text = "must not be in list [" + ", ".join(fmt(x) for x in sorted(banned)) + "]"
        tests.append(lambda v: text if v in banned else None)
    return tests


def _ordered_exprs(
    rules: Any, convert: Callable[[Any], Any], fmt: Callable[[Any], str]
) -> list[tuple[str, str]] | None:
    """``(python condition on v that holds when valid, reason)`` per rule, for rules
    that compare with constants; None when a rule needs more (in, not_in)."""
    fields = rules.DESCRIPTOR.fields_by_name
    for name in ("in", "not_in"):
        if name in fields and len(getattr(rules, name)):
            return None
    out: list[tuple[str, str]] = []
    for test in _ordered(rules, convert, fmt):
        code = getattr(test, "condition", None)
        if code is None:
            return None
        out.append(code)
    return out


def _all(tests: list[Callable[[Any], str | None]], ignore_empty: bool = False) -> Check | None:
    if not tests:
        return None

    def check(value: Any) -> None:
        if ignore_empty and not value:
            return
        for test in tests:
            reason = test(value)
            if reason is not None:
                raise _RuleBrokenError(reason)

    return check


# ------------------------------------------------------------------ strings and bytes

_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
_HEADER_NAME = re.compile(r"^:?[0-9a-zA-Z!#$%&'*+\-.^_|~`]+$")
_HEADER_VALUE = re.compile(r"^[^\x00-\x08\x0A-\x1F\x7F]*$")
_HEADER_LOOSE = re.compile(r"^[^\x00\n\r]*$")
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


def _pattern(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:  # an RE2-only construct: not checked rather than a false NACK
        return None


def _string_tests(r: Any) -> list[Callable[[Any], str | None]]:
    tests: list[Callable[[Any], str | None]] = []
    has = r.HasField
    if has("const"):
        const = r.const
        tests.append(lambda v: None if v == const else f"must equal {const!r}")
    if has("len"):
        n = r.len
        tests.append(lambda v: None if len(v) == n else f"length must be {n} characters")
    if has("min_len"):
        lo = r.min_len
        tests.append(lambda v: None if len(v) >= lo else f"length must be at least {lo} characters")
    if has("max_len"):
        hi = r.max_len
        tests.append(lambda v: None if len(v) <= hi else f"length must be at most {hi} characters")
    for name, op, word in (
        ("len_bytes", "==", ""),
        ("min_bytes", ">=", "at least "),
        ("max_bytes", "<=", "at most "),
    ):
        if has(name):
            tests.append(_byte_len(getattr(r, name), op, word, encode=True))
    tests.extend(_affix_tests(r))
    if has("not_contains"):
        needle = r.not_contains
        tests.append(lambda v: f"must not contain {needle!r}" if needle in v else None)
    kind = r.WhichOneof("well_known")
    if kind == "well_known_regex":
        strict = r.strict if r.HasField("strict") else True
        known = r.well_known_regex
        if not strict:
            regex, what = _HEADER_LOOSE, "header"
        elif known == pgv.HTTP_HEADER_NAME:
            regex, what = _HEADER_NAME, "header name"
        elif known == pgv.HTTP_HEADER_VALUE:
            regex, what = _HEADER_VALUE, "header value"
        else:
            regex = None
        if regex is not None:
            compiled = regex
            text = f"must be a valid HTTP {what}"
            tests.append(lambda v: None if compiled.match(v) else text)
    elif kind is not None and getattr(r, kind):
        test, text = _WELL_KNOWN_STRING[kind]
        tests.append(lambda v: None if test(v) else text)
    return tests


def _byte_len(n: int, op: str, word: str, *, encode: bool) -> Callable[[Any], str | None]:
    def size(v: Any) -> int:
        return len(v.encode()) if encode else len(v)

    text = f"length must be {word}{n} bytes"
    if op == "==":
        return lambda v: None if size(v) == n else text
    if op == ">=":
        return lambda v: None if size(v) >= n else text
    return lambda v: None if size(v) <= n else text


def _affix_tests(r: Any) -> list[Callable[[Any], str | None]]:
    tests: list[Callable[[Any], str | None]] = []
    has = r.HasField
    if has("pattern"):
        regex = _pattern(r.pattern)
        if regex is not None:
            text = f"does not match regex pattern {r.pattern!r}"
            if r.DESCRIPTOR.name == "BytesRules":
                tests.append(lambda v: None if regex.search(v.decode("utf-8", "replace")) else text)
            else:
                tests.append(lambda v: None if regex.search(v) else text)
    if has("prefix"):
        prefix = r.prefix
        tests.append(lambda v: None if v.startswith(prefix) else f"does not have prefix {prefix!r}")
    if has("suffix"):
        suffix = r.suffix
        tests.append(lambda v: None if v.endswith(suffix) else f"does not have suffix {suffix!r}")
    if has("contains"):
        needle = r.contains
        tests.append(lambda v: None if needle in v else f"does not contain {needle!r}")
    if len(getattr(r, "in")):
        allowed = frozenset(getattr(r, "in"))
        text = "must be in list [" + ", ".join(sorted(repr(x) for x in allowed)) + "]"
        tests.append(lambda v: None if v in allowed else text)
    if len(r.not_in):
        banned = frozenset(r.not_in)
        text = "must not be in list [" + ", ".join(sorted(repr(x) for x in banned)) + "]"
        tests.append(lambda v: text if v in banned else None)
    return tests


def _bytes_tests(r: Any) -> list[Callable[[Any], str | None]]:
    tests: list[Callable[[Any], str | None]] = []
    has = r.HasField
    if has("const"):
        const = r.const
        tests.append(lambda v: None if v == const else f"must equal {const!r}")
    if has("len"):
        tests.append(_byte_len(r.len, "==", "", encode=False))
    if has("min_len"):
        tests.append(_byte_len(r.min_len, ">=", "at least ", encode=False))
    if has("max_len"):
        tests.append(_byte_len(r.max_len, "<=", "at most ", encode=False))
    tests.extend(_affix_tests(r))
    kind = r.WhichOneof("well_known")
    if kind is not None and getattr(r, kind):
        want = {"ip": (4, 16), "ipv4": (4,), "ipv6": (16,)}[kind]
        text = f"must be a valid {kind.upper() if kind != 'ip' else 'IP'} address in bytes"
        tests.append(lambda v: None if len(v) in want else text)
    return tests


# ------------------------------------------------------------------ compiling fields

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


def _count_tests(r: Any, suffix: str, word: str) -> list[Callable[[Any], str | None]]:
    """``min_<suffix>``/``max_<suffix>`` of repeated (items) and map (pairs) rules."""
    tests: list[Callable[[Any], str | None]] = []
    if r.HasField(f"min_{suffix}"):
        lo = getattr(r, f"min_{suffix}")
        tests.append(lambda v: None if len(v) >= lo else f"must contain at least {lo} {word}(s)")
    if r.HasField(f"max_{suffix}"):
        hi = getattr(r, f"max_{suffix}")
        tests.append(lambda v: None if len(v) <= hi else f"must contain at most {hi} {word}(s)")
    return tests


def _scalar_check(kind: str | None, fd: FieldDescriptor | None, rules: Any) -> Check | None:
    """The check of one scalar value under FieldRules ``rules`` of kind ``kind``."""
    if kind is None:
        return None
    r = getattr(rules, kind)
    if kind in _NUMBER_KINDS:
        return _all(_ordered(r, lambda x: x, _fmt), r.ignore_empty)
    if kind == "bool":
        if r.HasField("const"):
            const = r.const
            return _all([lambda v: None if v == const else f"must equal {const}"])
        return None
    if kind == "string":
        return _all(_string_tests(r), r.ignore_empty)
    if kind == "bytes":
        return _all(_bytes_tests(r), r.ignore_empty)
    if kind == "enum":
        tests = _ordered(r, lambda x: x, _fmt)  # const, in, not_in (no lt/gt in EnumRules)
        if r.defined_only and fd is not None and fd.enum_type is not None:
            defined = frozenset(fd.enum_type.values_by_number)
            tests.append(
                lambda v: None if v in defined else "must be one of the defined enum values"
            )
        return _all(tests)
    return None


class _Compiler:
    """Per-type checkers, built once per process and shared by every protocol object."""

    def __init__(self) -> None:
        self._holders: dict[str, list[Check | None]] = {}
        self._reach: dict[str, bool] = {}
        self._any: dict[str, tuple[type[Message], Check] | None] = {}

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

    def checker(self, desc: Descriptor) -> Check | None:
        holder = self._holders.get(desc.full_name)
        if holder is None:
            holder = self._holders[desc.full_name] = [None]
            holder[0] = self._compile(desc)
        return holder[0]

    def _ref(self, desc: Descriptor) -> Check:
        """A call to ``desc``'s checker, which may still be under construction (cycles)."""
        holder = self._holders.get(desc.full_name)
        if holder is None:
            self.checker(desc)
            holder = self._holders[desc.full_name]
        built = holder[0]
        if built is not None:
            return built

        def call(value: Any) -> None:
            check = holder[0]
            if check is not None:
                check(value)

        return call

    def _compile(self, desc: Descriptor) -> Check | None:
        if _disabled(desc) or not self.needs_check(desc):
            return None
        # One function per message type, generated as PGV generates code, with the
        # path added on the way out of a failure only (a try block costs nothing
        # when nothing fails). A message with few checked fields asks each one
        # (HasField); one with many lists what it sets (ListFields, in C), so a
        # sparse Cluster does not pay for its forty unset checked fields.
        env: dict[str, Any] = {"E": _RuleBrokenError, "broken": _broken, **_NUMBER_NAMES}
        plans = [plan for fd in desc.fields if (plan := self._field_plan(fd, env)) is not None]
        absent_oneofs: list[str] = []
        for oneof in desc.oneofs:
            opts = oneof.GetOptions()
            if opts.HasExtension(pgv.required) and opts.Extensions[pgv.required]:
                key = _put(env, ("is required (set one of its fields)", [oneof.name]))
                absent_oneofs += [
                    f"    if m.WhichOneof({oneof.name!r}) is None:",
                    f"        raise broken(*{key})",
                ]
        if not plans and not absent_oneofs:
            return None
        body: list[str] = []
        if len(plans) <= _ASK_EACH_UP_TO:
            for plan in plans:
                body += plan.direct()
        else:
            dispatch: dict[Any, Check] = {}
            for plan in plans:
                dispatch[plan.fd] = plan.function(env)
                body += plan.absent()
            env["D"] = dispatch.get
            body = [
                "    for fd, v in m.ListFields():",
                "        f = D(fd)",
                "        if f is not None:",
                "            f(v)",
                *body,
            ]
        body += absent_oneofs
        return _define(f"rules of {desc.full_name}", ["def check(m):", *body], env)

    def _field_plan(self, fd: FieldDescriptor, env: dict[str, Any]) -> _FieldPlan | None:
        """How the generated check treats field ``fd``; None when no rule applies."""
        opts = fd.GetOptions()
        rules = opts.Extensions[pgv.rules] if opts.HasExtension(pgv.rules) else None
        name = fd.name
        entry = fd.message_type
        if fd.is_repeated:
            if entry is not None and entry.GetOptions().map_entry:
                check = self._map(fd, rules)
            else:
                check = self._repeated(fd, rules)
            if check is None:
                return None
            key = _put(env, check)  # it names its own path
            found = _failure_of(check, [])
            return _FieldPlan(
                fd, "container", [f"{key}(v)"], None if found is None else _put(env, found)
            )
        required = False
        if rules is not None and entry is not None:
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
        presence = "presence" if fd.has_presence else "plain"
        failure: tuple[str, list[str]] | None = None
        lines: list[str] = []
        inline = _inline_rules(fd, rules)
        if inline is not None:
            unpack, conditions = inline
            if unpack != "v":
                lines.append(f"v = {unpack}")
            for condition, reason in conditions:
                key = _put(env, (reason, [name]))
                lines += [f"if not ({condition}):", f"    raise broken(*{key})"]
                holds = eval(f"lambda v: {condition}", dict(_NUMBER_NAMES))
                if presence == "plain" and failure is None and not holds(fd.default_value):
                    failure = (reason, [name])
        else:
            value = self._value(fd, rules)
            if value is None and not required:
                return None
            if value is not None:
                key = _put(env, value)
                lines = [
                    "try:",
                    f"    {key}(v)",
                    "except E as e:",
                    f"    e.segments.append({name!r})",
                    "    raise",
                ]
                if presence == "plain":
                    found = _failure_of(value, fd.default_value)
                    failure = None if found is None else (found[0], [*found[1], name])
        if required:
            failure = ("is required", [name])
        if not lines and failure is None:
            return None
        return _FieldPlan(fd, presence, lines, None if failure is None else _put(env, failure))

    def _value(self, fd: FieldDescriptor, rules: Any) -> Check | None:
        """The check of one value of field ``fd`` (an item, for repeated fields)."""
        kind = rules.WhichOneof("type") if rules is not None else None
        desc = fd.message_type
        if desc is None:
            return _scalar_check(kind, fd, rules)
        full = desc.full_name
        if rules is not None and rules.HasField("message") and rules.message.skip:
            return None
        own: Check | None = None
        if full in _WRAPPERS and kind is not None and kind not in ("message",):
            inner = _scalar_check(kind, desc.fields_by_name["value"], rules)
            if inner is not None:
                wrapped = inner

                def own(w: Any) -> None:
                    wrapped(w.value)

        elif full == "google.protobuf.Duration" and kind == "duration":
            own = _all(_ordered(rules.duration, _nanos, _fmt_duration))
            if own is not None:
                dur = own

                def own(d: Any) -> None:
                    dur(_nanos(d))

        elif full == "google.protobuf.Timestamp" and kind == "timestamp":
            ts = _all(_ordered(rules.timestamp, _nanos, _fmt_timestamp))
            if ts is not None:
                tcheck = ts

                def own(t: Any) -> None:
                    tcheck(_nanos(t))

        if full == "google.protobuf.Any":
            return self._any_value(rules.any if kind == "any" else None)
        nested = self._ref(desc) if self.needs_check(desc) else None
        if own is None:
            return nested
        if nested is None:
            return own
        first, second = own, nested

        def both(value: Any) -> None:
            first(value)
            second(value)

        return both

    def _any_value(self, rules: Any) -> Check:
        tests: list[Callable[[Any], str | None]] = []
        if rules is not None and len(getattr(rules, "in")):
            allowed = frozenset(getattr(rules, "in"))
            text = "type URL must be in list [" + ", ".join(sorted(allowed)) + "]"
            tests.append(lambda a: None if a.type_url in allowed else text)
        if rules is not None and len(rules.not_in):
            banned = frozenset(rules.not_in)
            text = "type URL must not be in list [" + ", ".join(sorted(banned)) + "]"
            tests.append(lambda a: text if a.type_url in banned else None)
        payload = self._any_payload

        def check(value: Any) -> None:
            for test in tests:
                reason = test(value)
                if reason is not None:
                    raise _RuleBrokenError(reason)
            payload(value)

        return check

    def _any_payload(self, value: Any) -> None:
        type_url = value.type_url
        try:
            known = self._any[type_url]
        except KeyError:
            known = self._any[type_url] = self._any_type(type_url)
        if known is None:
            return  # a type this process does not know: not ours to judge
        cls, check = known
        try:
            inner = cls.FromString(value.value)
        except DecodeError as exc:
            raise _RuleBrokenError(f"cannot decode {type_url}: {exc}") from None
        try:
            check(inner)
        except _RuleBrokenError as exc:
            exc.segments.append(f"({cls.DESCRIPTOR.full_name})")
            raise

    def _any_type(self, type_url: str) -> tuple[type[Message], Check] | None:
        full = type_url.rpartition("/")[2]
        try:
            desc = descriptor_pool.Default().FindMessageTypeByName(full)
        except KeyError:
            return None
        check = self.checker(desc)
        if check is None:
            return None
        return message_factory.GetMessageClass(desc), check

    def _repeated(self, fd: FieldDescriptor, rules: Any) -> Check | None:
        name = fd.name
        r = rules.repeated if rules is not None and rules.HasField("repeated") else None
        item_rules = r.items if r is not None and r.HasField("items") else None
        item = self._value(fd, item_rules)
        tests: list[Callable[[Any], str | None]] = []
        ignore_empty = False
        if r is not None:
            ignore_empty = r.ignore_empty
            tests.extend(_count_tests(r, "items", "item"))
            if r.unique and fd.message_type is None:
                tests.append(
                    lambda v: None if len(set(v)) == len(v) else "must contain unique items"
                )
        if item is None and not tests:
            return None

        def check(values: Any) -> None:
            if ignore_empty and not values:
                return
            for test in tests:
                reason = test(values)
                if reason is not None:
                    exc = _RuleBrokenError(reason)
                    exc.segments.append(name)
                    raise exc
            if item is not None:
                for index, value in enumerate(values):
                    try:
                        item(value)
                    except _RuleBrokenError as exc:
                        exc.segments.extend((f"[{index}]", name))
                        raise

        return check

    def _map(self, fd: FieldDescriptor, rules: Any) -> Check | None:
        name = fd.name
        entry = fd.message_type
        assert entry is not None
        r = rules.map if rules is not None and rules.HasField("map") else None
        key = self._value(
            entry.fields_by_name["key"], r.keys if r is not None and r.HasField("keys") else None
        )
        val = self._value(
            entry.fields_by_name["value"],
            r.values if r is not None and r.HasField("values") else None,
        )
        tests: list[Callable[[Any], str | None]] = []
        ignore_empty = False
        if r is not None:
            ignore_empty = r.ignore_empty
            tests.extend(_count_tests(r, "pairs", "pair"))
        if key is None and val is None and not tests:
            return None

        def check(values: Any) -> None:
            if ignore_empty and not values:
                return
            for test in tests:
                reason = test(values)
                if reason is not None:
                    exc = _RuleBrokenError(reason)
                    exc.segments.append(name)
                    raise exc
            for k in values:
                try:
                    if key is not None:
                        key(k)
                    if val is not None:
                        val(values[k])
                except _RuleBrokenError as exc:
                    exc.segments.extend((f"[{k!r}]", name))
                    raise

        return check


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
        if fd.GetOptions().HasExtension(pgv.rules):
            return True
        if fd.message_type is not None and fd.message_type.full_name == "google.protobuf.Any":
            return True
    return False


def _inline_rules(fd: FieldDescriptor, rules: Any) -> tuple[str, list[tuple[str, str]]] | None:
    """(the compared number, from the field's value ``v``; conditions on it) when
    ``fd``'s rules compare a number, a number wrapper or a duration; else None."""
    if rules is None or fd.is_repeated:
        return None
    kind = rules.WhichOneof("type")
    desc = fd.message_type
    if kind in _NUMBER_KINDS:
        r = getattr(rules, kind)
        if r.ignore_empty:
            return None
        if desc is None:
            unpack = "v"
        elif desc.full_name in _WRAPPERS:
            unpack = "v.value"
        else:
            return None
        conditions = _ordered_exprs(r, lambda v: v, _fmt)
    elif kind == "duration" and desc is not None and desc.full_name == "google.protobuf.Duration":
        unpack = "v.seconds * 1000000000 + v.nanos"
        conditions = _ordered_exprs(rules.duration, _nanos, _fmt_duration)
    else:
        return None
    return None if conditions is None else (unpack, conditions)


_ASK_EACH_UP_TO = 6
"""Up to this many checked fields, a generated check asks each field (HasField)."""


def _put(env: dict[str, Any], value: Any) -> str:
    """Store ``value`` in the generated code's namespace; the name to use for it."""
    key = f"K{len(env)}"
    env[key] = value
    return key


def _define(label: str, lines: list[str], env: dict[str, Any]) -> Check:
    exec(compile("\n".join(lines) + "\n", f"<{label}>", "exec"), env)
    check: Check = env.pop(lines[0][4 : lines[0].index("(")])
    return check


class _FieldPlan:
    """One checked field of a generated check: what runs on a set value ``v``, and
    the failure (a key into the namespace) of a message that leaves it unset."""

    def __init__(self, fd: Any, kind: str, lines: list[str], absent_key: str | None) -> None:
        self.fd = fd
        self.kind = kind  # "presence", "plain" (a proto3 scalar) or "container"
        self.lines = lines
        self.absent_key = absent_key
        name = fd.name
        self.get = f"getattr(m, {name!r})" if keyword.iskeyword(name) else f"m.{name}"

    def direct(self) -> list[str]:
        """Lines for a check that asks this field itself."""
        name = self.fd.name
        body = ["        " + line for line in self.lines] or ["        pass"]
        if self.kind == "presence":
            out = [f"    if m.HasField({name!r}):", f"        v = {self.get}", *body]
        else:  # unset and empty are falsy: the absent failure, if any, decides
            out = [f"    v = {self.get}", "    if v:", *body]
        if self.absent_key is not None:
            out += ["    else:", f"        raise broken(*{self.absent_key})"]
        return out

    def function(self, env: dict[str, Any]) -> Check:
        """The check of a set value, for the ListFields dispatch."""
        body = ["    " + line for line in self.lines] or ["    pass"]
        return _define(f"field {self.fd.full_name}", ["def field(v):", *body], env)

    def absent(self) -> list[str]:
        """Lines for the ListFields form: the failure of a message without this field."""
        if self.absent_key is None:
            return []
        present = f"m.HasField({self.fd.name!r})" if self.kind == "presence" else self.get
        return [f"    if not {present}:", f"        raise broken(*{self.absent_key})"]


def _failure_of(check: Check, default: Any) -> tuple[str, list[str]] | None:
    """(reason, path segments) when ``check`` rejects ``default``, else None."""
    try:
        check(default)
    except _RuleBrokenError as exc:
        return exc.reason, list(exc.segments)
    return None


def _broken(reason: str, segments: list[str]) -> _RuleBrokenError:
    exc = _RuleBrokenError(reason)
    exc.segments.extend(segments)
    return exc


_COMPILER = _Compiler()


def _label(desc: Descriptor) -> str:
    """``RouteConfiguration`` -> ``route configuration``, for messages."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", desc.name).lower()


def rule_violation(message: Message) -> tuple[str, str] | None:
    """``(field path, reason)`` of the first rule ``message`` breaks, or None."""
    check = _COMPILER.checker(cast("Descriptor", message.DESCRIPTOR))
    if check is None:
        return None
    try:
        check(message)
    except _RuleBrokenError as exc:
        return exc.path(), exc.reason
    return None


def check_rules(message: Message) -> str | None:
    """The NACK reason for ``message`` under its ``(validate.rules)``, or None."""
    found = rule_violation(message)
    if found is None:
        return None
    path, reason = found
    return f"{path}: {reason}" if path else reason


def validate(message: Message) -> None:
    """Check ``message`` against its proto's ``(validate.rules)`` (protoc-gen-validate).

    Raises :class:`~xds_client.errors.RuleViolationError` naming the message, its
    name when it has one, and the path of the first field that breaks a rule, e.g.
    ``cluster 'svc': connect_timeout: must be greater than 0s``.
    """
    found = rule_violation(message)
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
