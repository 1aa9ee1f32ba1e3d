"""What each ``(validate.rules)`` rule means, as Python conditions.

A rule of a field becomes ``(condition on v, reason)`` pairs (:func:`_scalar_conds`
and friends) that the writer of checkers (``_rules_writer``) puts into a checker's
lines, and the shapes (``_shapes``) into the check of a hole. A value a condition needs
is written in place when it is a constant, else put in the namespace of the code being
written (:func:`_put`) with the expression that makes it again in a module written at
build time (a compiled pattern, a predicate of this module). Also here: where a field's
rules come from (its descriptor, or Envoy's own protos when the installed descriptors
lag, ``_ENVOY_RULES``), the error a broken rule raises, and the layout of a check's
context.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import re2
from google.protobuf import descriptor_pool, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from validate import validate_pb2 as pgv

Check = Callable[[Any, list[Any]], None]
"""``check(value, ctx)``: raises :class:`_RuleBrokenError` when ``value`` breaks a rule;
``ctx`` is ``[now, now_seen, grew]``: the caller's Unix time or None, whether a rule
compared a value with it (the verdict of such a check is not memoised), and whether the
check read a repeated or map field the message does not hold (see :func:`rules_verdict`)."""


def _nothing(value: Any, ctx: list[Any]) -> None:
    """The check of a type without rules."""


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


def _broken(reason: str, segments: list[str] | tuple[str, ...] = ()) -> _RuleBrokenError:
    exc = _RuleBrokenError(reason)
    exc.segments.extend(segments)
    return exc


_NOW_SEEN = 1
"""Index of the flag in a check's context that a timestamp rule against ``now`` was
reached: such a verdict depends on ``now`` and is not memoised."""


_GREW = 2
"""Index of the flag in a check's context that an empty container was read: upb then
gave the message an empty array in its arena."""


_PASSED: tuple[str, tuple[str, ...]] = ("", ())
"""A memoised payload verdict that breaks no rule."""


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
            match = _put(env, regex.match, _REGEX_NAMES[regex] + ".match", "MATCH_HEADER")
            conds.append(
                (
                    f"{fast} or {match}(v) is not None",
                    f"must be a valid HTTP {what}",
                )
            )
    elif kind is not None and getattr(r, kind):
        test, text = _WELL_KNOWN_STRING[kind]
        source = f"rules._WELL_KNOWN_STRING[{kind!r}][0]"
        conds.append((f"{_put(env, test, source, f'IS_{kind.upper()}')}(v)", text))
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
            search = _put(env, regex.search, f"re2.compile({r.pattern!r}).search", "SEARCH")
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


_FLOATING = (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE)


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


# ------------------------------------------------------------------ where rules come from


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


def _required_oneof(oneof: Any) -> bool:
    opts = oneof.GetOptions()
    return bool(opts.HasExtension(pgv.required) and opts.Extensions[pgv.required])


def _lower_bound_only(r: Any) -> int | None:
    """The bound in nanoseconds of DurationRules with only ``gt`` or ``gte``, else None."""
    fields = [fd.name for fd, _ in r.ListFields() if fd.name != "required"]
    if len(fields) == 1 and fields[0] in ("gt", "gte"):
        return _nanos(getattr(r, fields[0]))
    return None


# ------------------------------------------------------------------ values in written code


class _Env(dict[str, Any]):
    """The namespace of generated code while it is written: each value put in it, and
    the Python expression that makes it again in the written module (``sources``)."""

    def __init__(self, base: dict[str, Any]) -> None:
        super().__init__(base)
        self.sources: dict[str, str] = {}
        self.uses: dict[str, int] = {}  # how many names were made from each hint
        self.taken: set[str] = set()
        self.by_source: dict[str, str] = {}  # one name per expression
        self.checkers: dict[str, str] = {}  # the name of each type's checker, by full name

    def name(self, hint: str = "VALUE") -> str:
        """A new name: ``hint``, then ``hint_2``, ``hint_3``... (never one taken)."""
        n = self.uses.get(hint, 0)
        while True:
            n += 1
            key = hint if n == 1 else f"{hint}_{n}"
            if key not in self.taken:
                break
        self.uses[hint] = n
        self.taken.add(key)
        return key


def _put(env: dict[str, Any], value: Any, source: str | None = None, hint: str = "VALUE") -> str:
    """How generated code names ``value``: written in place when it is a constant (a
    string, a number, a set of them after ``in``: Python folds it), else a name in the
    code's namespace. ``source`` is the expression that makes such a value in a
    written module (default: the value written as a literal)."""
    if source is None:
        inline = _inline(value)
        if inline is not None:
            return inline
    if isinstance(env, _Env):
        text = _literal(value) if source is None else source
        key = env.by_source.get(text, "")
        if key:
            return key
        key = env.by_source[text] = env.name(hint)
        env.sources[key] = text
    else:
        key = f"K{len(env)}"
    env[key] = value
    return key


def _inline(value: Any) -> str | None:
    """``value`` as a constant of Python source, or None (a set only after ``in``)."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, tuple) and all(
        isinstance(item, (str, int, float, bytes))
        or (isinstance(item, list) and all(isinstance(x, str) for x in item))
        for item in value
    ):
        return _literal(value)
    constants = all(
        isinstance(item, (str, int, bytes)) or (isinstance(item, float) and math.isfinite(item))
        for item in value
    )
    if isinstance(value, frozenset) and value and constants:
        return _literal(value)[len("frozenset(") : -1]
    return None


def raise_broken(failure: str) -> str:
    """The line raising ``failure``, a ``(reason, path)`` written in place or named."""
    if failure.startswith("("):
        return f"raise broken{failure}"
    return f"raise broken(*{failure})"


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


_BASE_ENV: dict[str, Any] = {
    "E": _RuleBrokenError,
    "broken": _broken,
    "copysign": math.copysign,
    **_NUMBER_NAMES,
}
"""What the conditions may name besides the constants put beside them."""


# ------------------------------------------------------------------ holes of shapes (see _shapes)


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
