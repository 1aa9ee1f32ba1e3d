"""Kubernetes label selectors: the text grammar of apimachinery's ``labels.Parse``.

::

    <selector>    ::= <requirement> | <requirement> "," <selector>
    <requirement> ::= [!] KEY [ <set-based> | <exact-match> | <compare> ]
    <set-based>   ::= ("in" | "notin") "(" VALUE ["," VALUE]* ")"
    <exact-match> ::= ("=" | "==" | "!=") VALUE
    <compare>     ::= (">" | "<") INTEGER

A bare ``KEY`` means "exists", ``!KEY`` "does not exist". Values of a set are
deduplicated and sorted, requirements are sorted by key, and keys and values
are validated as Kubernetes label keys and values, as apimachinery does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from xds_client.store._errors import SelectorError
from xds_client.store._proto import resource_pb2 as pb

__all__ = ["Requirement", "parse_selector", "matches", "to_requirements", "parse_field_selector"]

# Operator names as apimachinery's selection.Operator spells them (also the wire form).
EQUALS = "="
DOUBLE_EQUALS = "=="
NOT_EQUALS = "!="
IN = "in"
NOT_IN = "notin"
EXISTS = "exists"
DOES_NOT_EXIST = "!"
GREATER_THAN = "gt"
LESS_THAN = "lt"

_BINARY = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)
_ALL_OPERATORS = (*_BINARY, EXISTS, DOES_NOT_EXIST)

_QNAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_INT64 = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class Requirement:
    """One condition on labels: ``key``, ``operator`` and ``values``.

    Operators are apimachinery's: ``=``, ``==``, ``!=``, ``in``, ``notin``,
    ``exists``, ``!`` (does not exist), ``gt`` and ``lt``.
    """

    key: str
    """The label key."""
    operator: str
    """One of the operator names above."""
    values: tuple[str, ...] = ()
    """The values, sorted and unique; one for ``=``, ``==``, ``!=``, ``gt``, ``lt``."""
    exact: bool = False
    """Today's Grafana's ``Requirement.exact``: an ``=`` with one value, matched exactly.

    Matching is the same as without it (label values are compared exactly
    anyway); it tells the server it may use an exact index lookup.
    """

    def __post_init__(self) -> None:
        if self.exact and (self.operator not in (EQUALS, DOUBLE_EQUALS) or len(self.values) != 1):
            raise SelectorError(
                f"an exact requirement on {self.key!r} needs operator '=' and one value"
            )

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a set of labels satisfies this requirement (apimachinery's rules)."""
        op = self.operator
        if op in (IN, EQUALS, DOUBLE_EQUALS):
            value = labels.get(self.key)
            return value is not None and value in self.values
        if op in (NOT_IN, NOT_EQUALS):
            value = labels.get(self.key)
            return value is None or value not in self.values
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        if op in (GREATER_THAN, LESS_THAN):
            value = labels.get(self.key)
            if value is None or len(self.values) != 1:
                return False
            have, want = _parse_int(value), _parse_int(self.values[0])
            if have is None or want is None:
                return False
            return have > want if op == GREATER_THAN else have < want
        return False

    def to_proto(self) -> pb.Requirement:
        """The wire form."""
        return pb.Requirement(
            key=self.key, operator=self.operator, values=self.values, exact=self.exact
        )

    @classmethod
    def from_proto(cls, req: pb.Requirement) -> Requirement:
        """Build from the wire form (not validated)."""
        exact = req.exact and req.operator in (EQUALS, DOUBLE_EQUALS) and len(req.values) == 1
        return cls(req.key, req.operator, tuple(req.values), exact)

    def __str__(self) -> str:
        op = self.operator
        if op == EXISTS:
            return self.key
        if op == DOES_NOT_EXIST:
            return "!" + self.key
        if op in (IN, NOT_IN):
            return f"{self.key} {op} ({','.join(self.values)})"
        symbol = {GREATER_THAN: ">", LESS_THAN: "<"}.get(op, op)
        return f"{self.key}{symbol}{self.values[0] if self.values else ''}"


def _parse_int(text: str) -> int | None:
    # fullmatch: "$" would also match before a final newline, letting "5\n" pass.
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def matches(requirements: Iterable[Requirement], labels: Mapping[str, str]) -> bool:
    """Whether labels satisfy every requirement (an empty selector matches all)."""
    return all(r.matches(labels) for r in requirements)


def to_requirements(selector: str | Sequence[Requirement] | None) -> tuple[Requirement, ...]:
    """Accept a selector as text, as requirements, or None (everything)."""
    if selector is None:
        return ()
    if isinstance(selector, str):
        return parse_selector(selector)
    return tuple(selector)


# ---------------------------------------------------------------- validation


def _key_errors(key: str) -> list[str]:
    errs: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errs.append("prefix part must be no more than 253 characters")
            if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
                errs.append(
                    "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                    "alphanumeric characters, '-' or '.', and must start and end with an "
                    "alphanumeric character"
                )
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QNAME.fullmatch(name):
        errs.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character"
        )
    return errs


def _value_errors(value: str) -> list[str]:
    errs: list[str] = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if value and not _QNAME.fullmatch(value):
        errs.append(
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return errs


def _check_key(key: str) -> None:
    errs = _key_errors(key)
    if errs:
        raise SelectorError(f"invalid label key {key!r}: {'; '.join(errs)}")


def new_requirement(key: str, operator: str, values: Sequence[str]) -> Requirement:
    """Build a validated requirement, as apimachinery's ``NewRequirement``."""
    errs: list[str] = []
    key_errs = _key_errors(key)
    if key_errs:
        errs.append(f"key {key!r}: {'; '.join(key_errs)}")
    if operator in (IN, NOT_IN):
        if not values:
            errs.append("for 'in', 'notin' operators, values set can't be empty")
    elif operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
        if len(values) != 1:
            errs.append("exact-match compatibility requires one single value")
    elif operator in (EXISTS, DOES_NOT_EXIST):
        if values:
            errs.append("values set must be empty for exists and does not exist")
    elif operator in (GREATER_THAN, LESS_THAN):
        if len(values) != 1:
            errs.append("for 'Gt', 'Lt' operators, exactly one value is required")
        errs.extend(
            f"value {v!r}: for 'Gt', 'Lt' operators, the value must be an integer"
            for v in values
            if _parse_int(v) is None
        )
    else:
        errs.append(f"operator {operator!r} is not supported, use one of {list(_ALL_OPERATORS)}")
    for v in values:
        value_errs = _value_errors(v)
        if value_errs:
            errs.append(f"value {v!r}: {'; '.join(value_errs)}")
    if errs:
        raise SelectorError("; ".join(errs))
    return Requirement(key, operator, tuple(values))


# ---------------------------------------------------------------- lexer


class _Tok(Enum):
    END = "end of string"
    CLOSE = ")"
    COMMA = ","
    NOT = "!"
    DOUBLE_EQUALS = "=="
    EQUALS = "="
    GT = ">"
    ID = "identifier"
    IN = "in"
    LT = "<"
    NOT_EQUALS = "!="
    NOT_IN = "notin"
    OPEN = "("


_LITERALS = {
    ")": _Tok.CLOSE,
    ",": _Tok.COMMA,
    "!": _Tok.NOT,
    "==": _Tok.DOUBLE_EQUALS,
    "=": _Tok.EQUALS,
    ">": _Tok.GT,
    "in": _Tok.IN,
    "<": _Tok.LT,
    "!=": _Tok.NOT_EQUALS,
    "notin": _Tok.NOT_IN,
    "(": _Tok.OPEN,
}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")


def _lex(text: str) -> list[tuple[_Tok, str]]:
    # apimachinery's lexer reads a NUL byte as "no more input" only where a token
    # starts; inside a token the NUL ends that token, is consumed, and lexing goes on.
    items: list[tuple[_Tok, str]] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= n or text[pos] == "\0":
            items.append((_Tok.END, ""))
            return items
        if text[pos] in _SPECIAL:
            # Longest run of special characters that is still a known token.
            best: tuple[_Tok, str] | None = None
            end = pos
            while end < n and text[end] in _SPECIAL:
                candidate = text[pos : end + 1]
                tok = _LITERALS.get(candidate)
                if tok is not None:
                    best = (tok, candidate)
                elif best is not None:
                    break
                end += 1
            assert best is not None  # every single special character is a token
            items.append(best)
            pos += len(best[1])
            if end == pos and pos < n and text[pos] == "\0":
                pos += 1  # the NUL that ended the run
        else:
            start = pos
            while pos < n and text[pos] not in _SPECIAL and text[pos] not in _WHITESPACE:
                if text[pos] == "\0":
                    break
                pos += 1
            word = text[start:pos]
            if pos < n and text[pos] == "\0":
                pos += 1  # consumed, as Go's scanIDOrKeyword does
            items.append((_LITERALS.get(word, _Tok.ID), word))


# ---------------------------------------------------------------- parser


class _Parser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def peek(self, values: bool) -> tuple[_Tok, str]:
        tok, lit = self.items[self.pos]
        if values and tok in (_Tok.IN, _Tok.NOT_IN):
            tok = _Tok.ID
        return tok, lit

    def take(self, values: bool) -> tuple[_Tok, str]:
        item = self.peek(values)
        self.pos += 1
        return item

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self.peek(values=True)
            if tok in (_Tok.ID, _Tok.NOT):
                try:
                    reqs.append(self.requirement())
                except SelectorError as exc:
                    raise SelectorError(f"unable to parse requirement: {exc}") from None
                tok, lit = self.take(values=True)
                if tok is _Tok.END:
                    return reqs
                if tok is _Tok.COMMA:
                    tok2, lit2 = self.peek(values=True)
                    if tok2 not in (_Tok.ID, _Tok.NOT):
                        raise SelectorError(f"found '{lit2}', expected: identifier after ','")
                    continue
                raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            if tok is _Tok.END:
                return reqs
            raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> Requirement:
        key, operator = self.key_and_inferred_operator()
        if operator in (EXISTS, DOES_NOT_EXIST):
            return new_requirement(key, operator, [])
        operator = self.operator()
        values = self.value_set() if operator in (IN, NOT_IN) else {self.exact_value()}
        return new_requirement(key, operator, sorted(values))

    def key_and_inferred_operator(self) -> tuple[str, str]:
        operator = ""
        tok, lit = self.take(values=True)
        if tok is _Tok.NOT:
            operator = DOES_NOT_EXIST
            tok, lit = self.take(values=True)
        if tok is not _Tok.ID:
            raise SelectorError(f"found '{lit}', expected: identifier")
        _check_key(lit)
        nxt, _ = self.peek(values=True)
        if nxt in (_Tok.END, _Tok.COMMA) and operator != DOES_NOT_EXIST:
            operator = EXISTS
        return lit, operator

    def operator(self) -> str:
        tok, lit = self.take(values=False)
        op = {
            _Tok.IN: IN,
            _Tok.EQUALS: EQUALS,
            _Tok.DOUBLE_EQUALS: DOUBLE_EQUALS,
            _Tok.GT: GREATER_THAN,
            _Tok.LT: LESS_THAN,
            _Tok.NOT_IN: NOT_IN,
            _Tok.NOT_EQUALS: NOT_EQUALS,
        }.get(tok)
        if op is None:
            raise SelectorError(f"found '{lit}', expected: {', '.join(_BINARY)}")
        return op

    def value_set(self) -> set[str]:
        tok, lit = self.take(values=True)
        if tok is not _Tok.OPEN:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.peek(values=True)
        if tok in (_Tok.ID, _Tok.COMMA):
            values = self.identifiers()
            tok, _ = self.take(values=True)
            if tok is not _Tok.CLOSE:
                raise SelectorError(f"found '{lit}', expected: ')'")
            return values
        if tok is _Tok.CLOSE:
            self.take(values=True)
            return {""}
        raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def identifiers(self) -> set[str]:
        # Elements separated by commas, any of them empty: "(,a)", "(a,,b)" and
        # "(a,,)" all carry "" (apimachinery accepts the last since 1.35).
        values: set[str] = set()
        while True:
            tok, lit = self.peek(values=True)
            if tok is _Tok.ID:
                self.take(values=True)
                values.add(lit)
            elif tok in (_Tok.COMMA, _Tok.CLOSE):
                values.add("")
            else:
                raise SelectorError(f"found '{lit}', expected: ',', or identifier")
            tok2, lit2 = self.peek(values=True)
            if tok2 is _Tok.COMMA:
                self.take(values=True)
                continue
            if tok2 is _Tok.CLOSE:
                return values
            raise SelectorError(f"found '{lit2}', expected: ',' or ')'")

    def exact_value(self) -> str:
        tok, _ = self.peek(values=True)
        if tok in (_Tok.END, _Tok.COMMA):
            return ""
        tok, lit = self.take(values=True)
        if tok is _Tok.ID:
            return lit
        raise SelectorError(f"found '{lit}', expected: identifier")


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """Parse a label selector such as ``"app=web,tier in (a,b),!legacy"``.

    Returns the requirements sorted by key; an empty string selects everything.
    Raises :class:`SelectorError` with apimachinery's explanation on bad input.
    """
    reqs = _Parser(text).parse()
    reqs.sort(key=lambda r: r.key)
    return tuple(reqs)


# ---------------------------------------------------------------- field selectors


def parse_field_selector(text: str) -> tuple[Requirement, ...]:
    """Parse a Kubernetes field selector such as ``"metadata.name=a,spec.x!=b"``.

    Terms are ``key=value``, ``key==value`` or ``key!=value`` separated by
    commas; ``\\``, ``,`` and ``=`` in a value are escaped with a backslash, as
    in apimachinery's ``fields.ParseSelector``. Sent to the server as
    ``ListOptions.fields`` (best effort there) and applied again on the client.
    """
    reqs: list[Requirement] = []
    for term in _split_unescaped(text, ","):
        if not term:
            continue
        for symbol, op in (("!=", NOT_EQUALS), ("==", DOUBLE_EQUALS), ("=", EQUALS)):
            index = _find_unescaped(term, symbol)
            if index >= 0:
                key, value = term[:index], term[index + len(symbol) :]
                if not key:
                    raise SelectorError(f"invalid field selector term {term!r}: empty field")
                reqs.append(Requirement(key, op, (_unescape(value),)))
                break
        else:
            raise SelectorError(f"invalid field selector term {term!r}: no operator (=, ==, !=)")
    reqs.sort(key=lambda r: r.key)
    return tuple(reqs)


def to_field_requirements(
    selector: str | Sequence[Requirement] | None,
) -> tuple[Requirement, ...]:
    """Accept a field selector as text, as requirements, or None (everything)."""
    if selector is None:
        return ()
    if isinstance(selector, str):
        return parse_field_selector(selector)
    return tuple(selector)


def field_value(doc: object, path: str) -> str | None:
    """The value at a dotted path of a decoded object, as a field selector compares it."""
    node = doc
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, str | int | float):
        return str(node)
    return None


def fields_match(requirements: Iterable[Requirement], doc: object) -> bool:
    """Whether a decoded object satisfies every field requirement."""
    for req in requirements:
        value = field_value(doc, req.key)
        if req.operator == NOT_EQUALS:
            if value is not None and value in req.values:
                return False
        elif value is None or value not in req.values:
            return False
    return True


def _find_unescaped(text: str, symbol: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(symbol, i):
            return i
        i += 1
    return -1


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, start, i = [], 0, 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == sep:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value):
            out.append(value[i + 1])
            i += 2
            continue
        out.append(value[i])
        i += 1
    return "".join(out)
