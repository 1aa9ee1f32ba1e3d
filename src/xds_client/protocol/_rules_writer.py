"""Writing checkers: Python source that checks a message type's ``(validate.rules)``.

:func:`module_text` writes a module of ``check_<name>(m0, ctx)`` functions, one per
message type, the way PGV generates code: straight-line tests of the fields that carry
a rule at any depth (nested messages without a rule are never touched; the member of
a oneof is found with one WhichOneof), the checks of small nested messages inlined,
and the failing field's path built only on the way out of a failure. The same text is
written to ``_rules_generated/`` at build time (``tools/gen_rules.py``) and run at run
time for a type no written module covers. What the module needs of the compiler that
runs it (``Any`` payloads, the memo, the checkers of other types) it asks of ``rt``
(``_rules._Linker``).
"""

from __future__ import annotations

import keyword
import re
from typing import Any, NamedTuple

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from ._rules_meanings import (
    _BASE_ENV,
    _GREW,
    _NOW_SEEN,
    _WRAPPERS,
    Cond,
    _cond_lines,
    _disabled,
    _Env,
    _field_rules,
    _fmt_duration,
    _fmt_timestamp,
    _indent,
    _literal,
    _lower_bound_only,
    _nanos,
    _now_conds,
    _ordered,
    _own_rules,
    _put,
    _rejects,
    _required_oneof,
    _scalar_conds,
    raise_broken,
)

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


_MEMO_FIELDS = 6
"""Sub-messages of a type with this many checked fields (or with a list of checked
messages) are looked up in the memo by their serialized bytes before being checked:
serializing a small message costs a fifth to a half of checking one such."""


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


class _Gen:
    """Writes the body of one generated check. Variables: ``m<d>`` the message at
    depth d, ``h<d>`` its HasField, ``w<d>_<i>`` the member set in its oneof ``i``,
    ``p<d>_<n>`` whether its field ``n`` is set (when the failure of an unset field
    comes after the other fields), ``c<d>``/``i<d>``/``k<d>`` a repeated or map field of
    it and its index or key, ``v`` the scalar under test; ``ctx`` is ``[now, flag]``:
    the caller's Unix time or None, and whether a rule against it was reached."""

    def __init__(self, facts: TypeFacts, env: _Env, root: Descriptor) -> None:
        self.c = facts
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
            fail = None if plan.failure is None else f"    {raise_broken(plan.failure)}"
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
            lines += [f"if {member} is None:", f"    {raise_broken(key)}"]
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
            source = f"rt.any_check({_literal(allowed)}, {_literal(banned)})"
            check = _put(self.env, None, source, "CHECK_ANY")
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
        memoised = self.env.name(f"{call}_MEMO")
        off = self.env.name(f"{memoised}_STATE")
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
            hint = "CHECK_" + _local_name(desc).upper()
            key = self.env.checkers[desc.full_name] = self.env.name(hint)
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
            lines += [f"if '' in c{depth}:", f"    {raise_broken(empty_key)}"]
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


def _getter(message: str, name: str) -> str:
    return f"getattr({message}, {name!r})" if keyword.iskeyword(name) else f"{message}.{name}"


def _local_name(desc: Descriptor) -> str:
    """``envoy.config.cluster.v3.Cluster.LbSubsetConfig`` -> ``cluster_lb_subset_config``."""
    local = desc.full_name[len(desc.file.package) + 1 :] if desc.file.package else desc.full_name
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", local)
    return words.replace(".", "_").lower()


def _function_name(desc: Descriptor, taken: set[str]) -> str:
    """``envoy.config.cluster.v3.Cluster.LbSubsetConfig`` -> ``check_cluster_lb_subset_config``."""
    name = "check_" + _local_name(desc)
    unique, n = name, 1
    while unique in taken:
        n += 1
        unique = f"{name}_{n}"
    taken.add(unique)
    return unique


def module_text(
    facts: TypeFacts, descs: list[Descriptor], preamble: str = ""
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
        if _disabled(desc) or not facts.needs_check(desc):
            continue
        gen = _Gen(facts, env, desc)
        body = gen.message(desc, 0)
        if not body:
            continue
        called += gen.called
        # The descriptors of the fields read, kept alive: upb makes a container of an
        # unset repeated field with its Python FieldDescriptor, which it caches only
        # while someone holds it (otherwise it makes and frees one at every read).
        messages = tuple(sorted({str(fd.containing_type.full_name) for fd in gen.fields}))  # type: ignore[union-attr]
        _put(env, None, f"rt.keep_fields({_literal(messages)})", "FIELDS")
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
    imports.append("from xds_client.protocol import _rules_meanings as rules")
    imports.append("from xds_client.protocol._rules import linking")
    imports.append(
        "from xds_client.protocol._rules_meanings import _broken as broken, _RuleBrokenError as E"
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


class TypeFacts:
    """What the writer learns of message types, kept across the checkers it writes: which
    types need a check at all, how many of their fields are checked, and which are too
    long to inline (their checks are called)."""

    def __init__(self) -> None:
        self._reach: dict[str, bool] = {}
        self._checked: dict[str, int] = {}
        self.too_long: set[str] = set()  # types whose checks are called, not inlined

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
