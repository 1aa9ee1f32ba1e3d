"""Verdicts by shape: proving from its bytes that a template-made resource passes.

A control plane makes most resources of a kind from a few templates: ten thousand
clusters that differ only in their names, hosts and SNI. Once two of them have passed
the full check, what their bytes share is a *shape*: the wire format of the first,
with holes where the second differs (leaf values only: strings, bytes, numbers). A
resource whose bytes fill the same shape (the same tags and literal bytes around the
holes, message lengths that add up, nothing after the end) parses to the same tree but
for the values in the holes. It breaks no rule when those values pass the rules of
their fields, which one function generated per shape checks from the bytes, without
decoding or touching the message (so upb's arena does not grow either).

A shape only ever proves that a resource passes. One that fits no shape, or whose hole
breaks a rule, goes through the full check, which gives the verdict and its path. A
shape is learnt only from resources that passed the full check without comparing a
value with ``now``, whose ``Any`` payloads were all of types known to the checker, and
whose messages hold no singular field twice and no two members of one oneof (a parser
merges the first and keeps the last of the second, which a hole must not hide).

This module knows the wire format and nothing of PGV: the rules of a hole's field come
from ``hole_lines`` and the types of ``Any`` payloads from ``payload_type``, both given
by ``_rules``.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import unpack
from typing import Any, NamedTuple

from google.protobuf.descriptor import Descriptor, FieldDescriptor

__all__ = ["UNKNOWN", "ShapeBook", "ShapeHooks"]

_ANY = "google.protobuf.Any"

_SHAPES_PER_TYPE = 8
"""Shapes kept per resource type, most recently fitted first."""
_CANDIDATES = 4
"""Parsed resources kept per type that fitted no shape yet, to pair with later ones."""
_MAX_BYTES = 64 * 1024
"""Larger resources are not learnt from (parsing them in Python costs too much)."""
_MAX_HOLES = 512
"""No shape is made with more holes than this (the generated check stays small)."""
_MAX_DEPTH = 100
"""upb's default limit of nested messages."""
_MAX_PAUSE = 4096
"""After a learning that made no shape, the next ``pause`` passing resources are not
parsed (the pause doubles up to this, and resets when a shape is made or widened)."""
_FREE_LEARNS = 16
_PROOFS_PER_LEARN = 8
"""Past ``_FREE_LEARNS`` resources parsed for a type, a shape made or widened resets the
pause only if the type's shapes proved this many resources per one parsed: shapes that
keep changing (more structures than are kept) pay for their parsing or pause."""

_VARINT_TYPES = frozenset(
    (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_BOOL,
        FieldDescriptor.TYPE_ENUM,
    )
)
_FIXED64_TYPES = frozenset(
    (FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64, FieldDescriptor.TYPE_DOUBLE)
)
_FIXED32_TYPES = frozenset(
    (FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_FLOAT)
)

# How a hole's wire value (``h``: an int for a varint, else bytes) becomes the value
# ``v`` its field holds, as upb reads it.
_VALUE_OF: dict[int, str] = {
    FieldDescriptor.TYPE_INT32: "(({h} & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000",
    FieldDescriptor.TYPE_ENUM: "(({h} & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000",
    FieldDescriptor.TYPE_INT64: "(({h} & MASK64) ^ SIGN64) - SIGN64",
    FieldDescriptor.TYPE_UINT32: "{h} & 0xFFFFFFFF",
    FieldDescriptor.TYPE_UINT64: "{h} & MASK64",
    FieldDescriptor.TYPE_SINT32: "(({h} & 0xFFFFFFFF) >> 1) ^ -({h} & 1)",
    FieldDescriptor.TYPE_SINT64: "(({h} & MASK64) >> 1) ^ -({h} & 1)",
    FieldDescriptor.TYPE_BOOL: "{h} != 0",
    FieldDescriptor.TYPE_FIXED32: "unpack('<I', {h})[0]",
    FieldDescriptor.TYPE_SFIXED32: "unpack('<i', {h})[0]",
    FieldDescriptor.TYPE_FLOAT: "unpack('<f', {h})[0]",
    FieldDescriptor.TYPE_FIXED64: "unpack('<Q', {h})[0]",
    FieldDescriptor.TYPE_SFIXED64: "unpack('<q', {h})[0]",
    FieldDescriptor.TYPE_DOUBLE: "unpack('<d', {h})[0]",
    FieldDescriptor.TYPE_BYTES: "{h}",
}

UNKNOWN: Any = object()
"""What ``payload_type`` answers for a type URL the checker has not judged (no shape
may hold it: its verdict may change once the type's module loads)."""


class ShapeHooks(NamedTuple):
    """What the rules give this module."""

    hole_lines: Callable[[Descriptor, FieldDescriptor, Any, dict[str, Any]], list[str] | None]
    """``(message type, field, rules of the field holding the message, env)``: lines
    checking a value ``v`` of that field (raising on a broken rule), or None when its
    value may not vary in a shape (a map key, an ``Any``'s type URL, ...)."""
    held_rules: Callable[[Descriptor, FieldDescriptor, Any], Any]
    """``(message type, message field, rules of the field holding the message)``: the
    rules the checker applies to a message in that field (a repeated field's items
    rules, a map's values rules, ...), or None."""
    payload_type: Callable[[str], Any]
    """A type URL's descriptor when the checker checks its payloads; None for a type
    without rules; :data:`UNKNOWN` when not judged."""
    env: Callable[[], dict[str, Any]]
    """A fresh namespace for the generated code (what ``hole_lines`` refers to)."""


class _RefusedError(Exception):
    """Bytes, or a pair of resources, that make no shape."""


class _Token(NamedTuple):
    """One field on the wire."""

    tag: bytes
    raw: bytes
    """The whole field: tag, length and value."""
    wire: int
    fd: FieldDescriptor | None
    """The field, when known to the type and sent with its own wire type; a leaf then
    when ``sub`` is None."""
    sub: _Node | None
    """The parsed message (a message field, or an ``Any``'s payload)."""


class _Node(NamedTuple):
    desc: Descriptor
    parent_rules: Any
    """The rules of the field that holds this message (wrappers, durations: theirs)."""
    tokens: list[_Token]
    in_payload: bool
    """Inside an ``Any``'s payload: its strings were not checked for UTF-8 by the
    decoding of the resource."""


def _varint(data: bytes, p: int) -> tuple[int, int]:
    """The varint at ``p`` and the offset after it (IndexError past the end)."""
    result = 0
    shift = 0
    while True:
        byte = data[p]
        p += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, p
        shift += 7
        if shift >= 70:
            raise _RefusedError("varint too long")


def _wire_of(fd: FieldDescriptor) -> int:
    kind = fd.type
    if kind in _VARINT_TYPES:
        return 0
    if kind in _FIXED64_TYPES:
        return 1
    if kind in _FIXED32_TYPES:
        return 5
    if kind == FieldDescriptor.TYPE_GROUP:
        return 3
    return 2


def _parse(
    desc: Descriptor,
    data: bytes,
    parent_rules: Any,
    hooks: ShapeHooks,
    *,
    depth: int,
    in_payload: bool,
) -> _Node:
    if depth > _MAX_DEPTH:
        raise _RefusedError("too deep")
    tokens: list[_Token] = []
    singular: set[int] = set()
    oneofs: set[str] = set()
    fields = desc.fields_by_number
    end = len(data)
    p = 0
    try:
        while p < end:
            start = p
            key, p = _varint(data, p)
            number, wire = key >> 3, key & 7
            tag = data[start:p]
            if wire == 0:
                _, p = _varint(data, p)
                at = p
            elif wire == 1:
                p += 8
            elif wire == 5:
                p += 4
            elif wire == 2:
                size, at = _varint(data, p)
                p = at + size
            else:
                raise _RefusedError("group")
            if p > end:
                raise _RefusedError("truncated")
            fd = fields.get(number)
            if fd is not None and _wire_of(fd) != wire:
                fd = None  # read as an unknown field: it must stay as it is
            sub = None
            if fd is not None:
                if not fd.is_repeated:
                    if number in singular:
                        raise _RefusedError("a singular field twice")
                    singular.add(number)
                    oneof = fd.containing_oneof
                    if oneof is not None:
                        if oneof.name in oneofs:
                            raise _RefusedError("two members of a oneof")
                        oneofs.add(oneof.name)
                message = fd.message_type
                if message is not None:
                    sub = _parse(
                        message,
                        data[at:p],
                        hooks.held_rules(desc, fd, parent_rules),
                        hooks,
                        depth=depth + 1,
                        in_payload=in_payload,
                    )
            tokens.append(_Token(tag, data[start:p], wire, fd, sub))
    except IndexError:
        raise _RefusedError("truncated") from None
    if desc.full_name == _ANY:
        tokens = _payload(tokens, hooks, depth)
    return _Node(desc, parent_rules, tokens, in_payload)


def _payload(tokens: list[_Token], hooks: ShapeHooks, depth: int) -> list[_Token]:
    """An ``Any``'s tokens, its value parsed as the payload type it names."""
    urls = [t for t in tokens if t.fd is not None and t.fd.number == 1]
    values = [i for i, t in enumerate(tokens) if t.fd is not None and t.fd.number == 2]
    if not values:
        return tokens
    if len(urls) != 1:
        raise _RefusedError("an Any's payload without a type URL")
    url_token = urls[0]
    _, at = _varint(url_token.raw, len(url_token.tag))
    try:
        url = url_token.raw[at:].decode()
    except UnicodeDecodeError:
        raise _RefusedError("type URL") from None
    payload = hooks.payload_type(url)
    if payload is UNKNOWN:
        raise _RefusedError("a payload type not judged")
    if payload is None:
        return tokens  # no rules: its bytes may vary freely
    index = values[0]
    token = tokens[index]
    _, at = _varint(token.raw, len(token.tag))
    sub = _parse(payload, token.raw[at:], None, hooks, depth=depth + 1, in_payload=True)
    out = list(tokens)
    out[index] = token._replace(sub=sub)
    return out


Path = tuple[int, ...]


def _diff(a: _Node, b: _Node, path: Path, holes: set[Path]) -> None:
    """Add to ``holes`` the leaves where ``b`` differs from ``a``; refuse when their
    trees differ elsewhere."""
    if len(a.tokens) != len(b.tokens):
        raise _RefusedError("other fields")
    for i, (ta, tb) in enumerate(zip(a.tokens, b.tokens, strict=True)):
        if ta.raw == tb.raw:
            continue
        if ta.tag != tb.tag or ta.fd is None or tb.fd is None:
            raise _RefusedError("other fields")
        here = (*path, i)
        if ta.sub is not None and tb.sub is not None:
            _diff(ta.sub, tb.sub, here, holes)
        elif ta.sub is None and tb.sub is None and ta.fd.message_type is None:
            holes.add(here)
        else:
            raise _RefusedError("other payloads")
    if len(holes) > _MAX_HOLES:
        raise _RefusedError("too many holes")


class _Writer:
    """Writes a shape's ``fit(b)``: 0 when ``b`` does not fit, 1 when it fits but a hole
    breaks a rule (or cannot be read as its field's type), 2 when it fits and passes.

    Two ways to fit: first, at the offsets of the shape's own bytes (same length, each
    string hole as long as the shape's: its length is then among the literal bytes,
    and so are the lengths of the messages around it), a few comparisons; else read
    along, each hole's and each enclosing message's length from ``b``.
    """

    def __init__(self, holes: set[Path], hooks: ShapeHooks) -> None:
        self.holes = holes
        self.inner = {hole[:n] for hole in holes for n in range(1, len(hole))}
        self.hooks = hooks
        self.env = hooks.env()
        self.env.update(VI=_varint, R=_RefusedError, MASK64=(1 << 64) - 1, SIGN64=1 << 63)
        self.lines: list[str] = []
        self.checks: list[str] = []
        self.literal = b""
        self.count = 0
        self.pos = 0  # in the shape's own bytes
        self.spans: list[tuple[int, int, int, str]] = []  # (start, end, wire, h) of holes

    def name(self, value: Any) -> str:
        key = f"L{len(self.env)}"  # beside the rules' ``K<n>``
        self.env[key] = value
        return key

    def flush(self) -> None:
        if self.literal:
            lit = self.name(self.literal)
            self.lines += [f"if not b.startswith({lit}, p):", "    return 0"]
            self.lines.append(f"p += {len(self.literal)}")
            self.literal = b""

    def read_varint(self) -> None:
        self.lines += [
            "x = b[p]",
            "if x < 128:",
            "    p += 1",
            "elif b[p + 1] < 128:",
            "    x = (x & 127) | (b[p + 1] << 7)",
            "    p += 2",
            "else:",
            "    x, p = VI(b, p)",
        ]

    def node(self, node: _Node, path: Path) -> None:
        for i, token in enumerate(node.tokens):
            here = (*path, i)
            if here in self.holes:
                self.hole(node, token)
            elif here in self.inner:
                assert token.sub is not None
                self.literal += token.tag
                self.flush()
                self.read_varint()
                end = f"e{len(path)}"
                self.lines.append(f"{end} = p + x")
                _, at = _varint(token.raw, len(token.tag))
                self.pos += at
                self.node(token.sub, here)
                self.flush()
                self.lines += [f"if p != {end}:", "    return 0"]
            else:
                self.literal += token.raw
                self.pos += len(token.raw)

    def hole(self, node: _Node, token: _Token) -> None:
        fd = token.fd
        assert fd is not None
        lines = self.hooks.hole_lines(node.desc, fd, node.parent_rules, self.env)
        if lines is None:
            raise _RefusedError(f"{fd.full_name} may not vary")
        h = f"h{self.count}"
        self.count += 1
        if fd.type == FieldDescriptor.TYPE_STRING:
            # Strict UTF-8, as upb parses a proto3 string (the resource's own strings
            # were parsed already; a payload's were not).
            if lines or node.in_payload:
                self.checks += [f"v = {h}.decode()", *lines]
        elif lines:
            self.checks += ["v = " + _VALUE_OF[fd.type].format(h=h), *lines]
        read = bool(lines) or (fd.type == FieldDescriptor.TYPE_STRING and node.in_payload)
        self.literal += token.tag
        self.flush()
        start = self.pos + len(token.tag)
        if token.wire == 0:
            self.read_varint()
            if read:
                self.lines.append(f"{h} = x")
        elif token.wire == 2:
            self.read_varint()
            self.lines += [f"{h} = b[p:p + x]", "p += x"] if read else ["p += x"]
            _, start = _varint(token.raw, len(token.tag))
            start += self.pos
        else:
            size = 8 if token.wire == 1 else 4
            self.lines += [f"{h} = b[p:p + {size}]", f"p += {size}"] if read else [f"p += {size}"]
        self.pos += len(token.raw)
        self.spans.append((start, self.pos, token.wire, h if read else ""))

    def fixed(self, size: int, source: bytes) -> list[str]:
        """Lines setting ``ok`` when ``b`` fits at the shape's own offsets (holes read)."""
        tests = [f"len(b) == {size}"]
        reads: list[str] = []
        at = 0
        for start, end, wire, h in self.spans:
            if start > at:
                tests.append(f"b.startswith({self.name(source[at:start])}, {at})")
            if wire == 0:  # a varint as long as the shape's, ending where it ends
                reads += [f"{h or 'q'}, q = VI(b, {start})", f"ok = ok and q == {end}"]
            elif h:
                reads.append(f"{h} = b[{start}:{end}]")
            at = end
        if size > at:
            tests.append(f"b.startswith({self.name(source[at:])}, {at})")
        return [
            f"ok = {' and '.join(tests)}",
            *(["if ok:", *("    " + r for r in reads)] if reads else []),
        ]

    def function(self, root: _Node) -> Callable[[bytes], int]:
        self.lines = ["p = 0"]
        self.node(root, ())
        self.flush()
        self.lines += ["if p != len(b):", "    return 0"]
        source = b"".join(token.raw for token in root.tokens)
        body = ["def fit(b):", "    try:"]
        body += ["        " + line for line in self.fixed(self.pos, source)]
        body += ["        if not ok:"]
        body += ["            " + line for line in self.lines]
        body += [
            "    except (IndexError, R):  # past the end; a varint of over ten bytes",
            "        return 0",
        ]
        if self.checks:
            body += ["    try:"]
            body += ["        " + line for line in self.checks]
            body += ["    except Exception:", "        return 1"]
        body += ["    return 2"]
        self.env["unpack"] = unpack
        exec(compile("\n".join(body) + "\n", f"<shape of {root.desc.full_name}>", "exec"), self.env)
        fit: Callable[[bytes], int] = self.env.pop("fit")
        return fit


class _Shape(NamedTuple):
    tree: _Node
    holes: frozenset[Path]
    fit: Callable[[bytes], int]


def _shape(tree: _Node, holes: set[Path], hooks: ShapeHooks) -> _Shape:
    return _Shape(tree, frozenset(holes), _Writer(holes, hooks).function(tree))


class ShapeBook:
    """The shapes of one resource type, learnt from the resources that passed."""

    def __init__(self, desc: Descriptor, hooks: ShapeHooks) -> None:
        self.desc = desc
        self.hooks = hooks
        self.shapes: list[_Shape] = []
        self.candidates: list[_Node] = []
        self.skip = 0
        self.pause = 1
        self.learns = 0  # resources parsed to learn from
        self.proofs = 0  # resources proved by a shape

    def proves(self, data: bytes) -> bool:
        """Whether ``data`` fits a shape and its holes pass: it breaks no rule."""
        shapes = self.shapes
        for i, shape in enumerate(shapes):
            fit = shape.fit(data)
            if fit == 2:
                if i:
                    self.shapes = [shape, *(s for s in shapes if s is not shape)]
                self.proofs += 1
                return True
            if fit == 1:
                return False
        return False

    def learn(self, data: bytes) -> None:
        """``data`` passed the full check (without ``now``): make or widen a shape."""
        if self.skip:
            self.skip -= 1
            return
        if len(data) > _MAX_BYTES:
            return
        self.learns += 1
        if self._learn(data) and (
            self.learns <= _FREE_LEARNS or self.proofs >= self.learns * _PROOFS_PER_LEARN
        ):
            self.pause = 1
        else:  # no shape, or shapes that do not pay for their learning
            self._idle()

    def _learn(self, data: bytes) -> bool:
        try:
            tree = _parse(self.desc, data, None, self.hooks, depth=0, in_payload=False)
        except _RefusedError:
            return False
        for shape in self.shapes:  # one that fits but for more holes: widened
            holes = set(shape.holes)
            try:
                _diff(shape.tree, tree, (), holes)
                widened = _shape(shape.tree, holes, self.hooks)
            except _RefusedError:
                continue
            self.shapes = [widened, *(s for s in self.shapes if s is not shape)]
            return True
        for candidate in self.candidates:
            holes = set()
            try:
                _diff(candidate, tree, (), holes)
                made = _shape(candidate, holes, self.hooks)
            except _RefusedError:
                continue
            self.candidates = [c for c in self.candidates if c is not candidate]
            self.shapes = [made, *self.shapes][:_SHAPES_PER_TYPE]
            return True
        self.candidates = [tree, *self.candidates][:_CANDIDATES]
        return False

    def _idle(self) -> None:
        self.skip = self.pause
        self.pause = min(self.pause * 2, _MAX_PAUSE)
