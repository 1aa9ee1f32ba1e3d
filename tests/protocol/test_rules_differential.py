"""The optimised ``(validate.rules)`` checker against the reference one, message by message.

``_rules_reference`` is the checker as it was before it was made faster; every
message below must get the same verdict from both: None, or the same
``path: reason`` of the same first failing rule. The messages are the heavy xDS
resources (Cluster, Listener with an HttpConnectionManager and TLS contexts in
``Any`` payloads, RouteConfiguration, ClusterLoadAssignment), generated from their
descriptors with values taken near the bounds of their rules, and the bench
Cluster with mutations that break rules (several at once, so the order in which
the rules are tried decides the verdict). Timestamp rules against ``now`` ride in
``Any`` payloads, so the memo of payload verdicts is tried with and without it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.filters.http.router.v3.router_pb2 import (  # type: ignore[import-untyped]
    Router,
)
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st
from validate import validate_pb2 as pgv

from bench._data import make_cluster
from bench.validation import make_cla, make_listener, make_route
from xds_client.protocol import _rules, _rules_memo, _rules_writer

from . import _rules_reference as reference
from .test_validation_rules import NOW, NOW_CLASSES

Checker = Callable[..., "str | None"]

FD = FieldDescriptor
FDP = descriptor_pb2.FieldDescriptorProto
_SKIP = frozenset(
    ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")
)  # no rules inside, and values of their own kind
_INTS = {
    FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FD.TYPE_UINT32: (0, 2**32 - 1),
    FD.TYPE_FIXED32: (0, 2**32 - 1),
    FD.TYPE_UINT64: (0, 2**64 - 1),
    FD.TYPE_FIXED64: (0, 2**64 - 1),
}
_STRINGS = [
    *("", "a", "ab", "*", "/", "/api", "h2", "x" * 64, "y" * 300, "é" * 130, "ok-name"),
    *("10.0.0.1", "::1", "0.0.0.0", "host.example.com", "-bad-.host", "user@example.com"),
    *("bad\nvalue", "nul\x00", ":authority", "x-header", "Bad Header", "http://a/b", "a b"),
    *("x-name\n", "tab\there", "\x7f", "ok\r"),
    *("envoy.filters.http.router", "type.googleapis.com/google.protobuf.Duration"),
    "12345678-1234-1234-1234-123456789abc",
]
_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 100.0, 100.5, 1e300, math.inf, -math.inf, math.nan]
_SECONDS = [0, 0, 1, -1, 5, 315_576_000_000, -315_576_000_000]
_NANOS = [0, 0, 1, -1, 999_999_999, 1_000_000, -1_000_000]


def _descriptor(cls: type[Message]) -> Descriptor:
    return cast("Descriptor", cls.DESCRIPTOR)


def _numbers(rules: Message) -> list[float]:
    """Every number written in a field's rules, with its neighbours: the values
    that sit on the bounds."""
    found: list[float] = []
    for fd, value in rules.ListFields():
        if fd.message_type is not None:
            items = value if fd.is_repeated else [value]
            for item in items:
                found += _numbers(item)
            if fd.message_type.full_name == "google.protobuf.Duration":
                found += [float(value.seconds)]
        elif fd.cpp_type not in (FD.CPPTYPE_BOOL, FD.CPPTYPE_STRING, FD.CPPTYPE_ENUM):
            for item in value if fd.is_repeated else [value]:
                found += [item - 1, item, item + 1]
    return found


def _field_rules(fd: FieldDescriptor) -> pgv.FieldRules | None:
    opts = fd.GetOptions()
    return opts.Extensions[pgv.rules] if opts.HasExtension(pgv.rules) else None


class Builder:
    """Random messages from a descriptor, drawn with hypothesis."""

    def __init__(self, data: st.DataObject, payloads: list[AnyProto]) -> None:
        self.data = data
        self.payloads = payloads

    def draw(self, strategy: st.SearchStrategy[Any]) -> Any:
        return self.data.draw(strategy)

    def scalar(self, fd: FieldDescriptor) -> Any:
        rules = _field_rules(fd)
        near = _numbers(rules) if rules is not None else []
        kind = fd.type
        if kind == FD.TYPE_BOOL:
            return self.draw(st.booleans())
        if kind == FD.TYPE_STRING:
            extra = list(_strings_of(rules)) if rules is not None else []
            return self.draw(st.sampled_from(_STRINGS + extra) | st.text(max_size=8))
        if kind == FD.TYPE_BYTES:
            return self.draw(st.sampled_from([b"", b"ab", b"\x00" * 4, b"\x01" * 16, b"z" * 40]))
        if kind == FD.TYPE_ENUM:
            assert fd.enum_type is not None
            defined = list(fd.enum_type.values_by_number)
            return self.draw(st.sampled_from([*defined, max(defined) + 1, 99]))
        if kind in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
            return self.draw(st.sampled_from(_FLOATS + [float(x) for x in near]))
        lo, hi = _INTS[kind]
        pool = [0, 0, 1, -1, 2, 100, 65535, 65536, lo, hi] + [int(x) for x in near]
        return self.draw(st.sampled_from([x for x in pool if lo <= x <= hi]))

    def message(self, desc: Descriptor, depth: int) -> Message:
        cls = message_factory.GetMessageClass(desc)
        message = cls()
        full = desc.full_name
        if full in ("google.protobuf.Duration", "google.protobuf.Timestamp"):
            message.seconds = self.draw(st.sampled_from(_SECONDS))  # type: ignore[attr-defined]
            message.nanos = self.draw(st.sampled_from(_NANOS))  # type: ignore[attr-defined]
            return message
        if full == "google.protobuf.Any":
            message.CopyFrom(self.draw(st.sampled_from(self.payloads)))
            return message
        if full in _SKIP or depth > 5:
            return message
        fields = list(desc.fields)
        count = self.draw(st.integers(0, 6 if depth == 0 else 3))
        for fd in self.draw(st.lists(st.sampled_from(fields), max_size=count, unique=True)):
            self.set_field(message, fd, depth)
        return message

    def value(self, fd: FieldDescriptor, depth: int) -> Any:
        if fd.message_type is not None:
            return self.message(fd.message_type, depth + 1)
        return self.scalar(fd)

    def set_field(self, message: Message, fd: FieldDescriptor, depth: int) -> None:
        name = fd.name
        try:
            if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
                key_fd = fd.message_type.fields_by_name["key"]
                value_fd = fd.message_type.fields_by_name["value"]
                container = getattr(message, name)
                for _ in range(self.draw(st.integers(0, 2))):
                    key = (
                        self.scalar(key_fd)
                        if key_fd.type != FD.TYPE_STRING
                        else self.draw(st.sampled_from(["", "k", "key.two"]))
                    )
                    if value_fd.message_type is not None:
                        container[key].CopyFrom(self.message(value_fd.message_type, depth + 1))
                    else:
                        container[key] = self.scalar(value_fd)
            elif fd.is_repeated:
                container = getattr(message, name)
                for _ in range(self.draw(st.integers(0, 3))):
                    if fd.message_type is not None:
                        container.add().CopyFrom(self.message(fd.message_type, depth + 1))
                    else:
                        container.append(self.scalar(fd))
            elif fd.message_type is not None:
                getattr(message, name).CopyFrom(self.message(fd.message_type, depth + 1))
            else:
                setattr(message, name, self.scalar(fd))
        except (ValueError, TypeError):
            pass  # a value the field does not take (range, encoding): leave it as it is

    def mutate(self, message: Message, depth: int = 0) -> None:
        """Change one field somewhere below ``message``: set it to a drawn value, clear
        it, or go down into a set sub-message."""
        desc = message.DESCRIPTOR
        set_fields = [fd for fd, _ in message.ListFields()]
        fields = list(desc.fields)
        if not fields:  # an empty message (AggregatedConfigSource ...): nothing to change
            return
        fd = self.draw(st.sampled_from(set_fields) if set_fields else st.sampled_from(fields))
        if self.draw(st.booleans()) and set_fields is not fields:
            fd = self.draw(st.sampled_from(fields))
        sub = fd.message_type
        if sub is not None and not sub.GetOptions().map_entry and depth < 6:
            if fd.is_repeated and len(getattr(message, fd.name)) and self.draw(st.booleans()):
                items = getattr(message, fd.name)
                self.mutate(items[self.draw(st.integers(0, len(items) - 1))], depth + 1)
                return
            if not fd.is_repeated and message.HasField(fd.name) and self.draw(st.booleans()):
                self.mutate(getattr(message, fd.name), depth + 1)
                return
        if self.draw(st.booleans()):
            message.ClearField(fd.name)
        else:
            message.ClearField(fd.name)
            self.set_field(message, fd, depth)


def _strings_of(rules: Message) -> Iterator[str]:
    """The strings a field's rules name (prefixes, allowed lists ...), and each cut short."""
    for fd, value in rules.ListFields():
        if fd.message_type is not None:
            for item in value if fd.is_repeated else [value]:
                yield from _strings_of(item)
        elif fd.type == FD.TYPE_STRING:
            for item in value if fd.is_repeated else [value]:
                yield item
                yield item[:-1]


def _pack(message: Message) -> AnyProto:
    packed = AnyProto()
    packed.Pack(message)
    return packed


def _payloads() -> list[AnyProto]:
    """``Any`` values for the generated messages: valid and invalid payloads of known
    types, one that does not decode, one of an unknown type, timestamp rules."""
    manager = make_listener(3).filter_chains[0].filters[0].typed_config
    bad_tls = tls_pb2.UpstreamTlsContext(sni="s" * 300)
    bad_hcm = hcm.HttpConnectionManager(stat_prefix="x")  # no route_specifier
    return [
        AnyProto(),
        manager,
        _pack(Router()),
        _pack(bad_tls),
        _pack(bad_hcm),
        _pack(tls_pb2.UpstreamTlsContext(sni="ok")),
        AnyProto(type_url="type.googleapis.com/no.such.Type", value=b"\x08\x01"),
        AnyProto(type_url=manager.type_url, value=b"\xff\xff\xff"),  # does not decode
        *(_pack(cls(val={"seconds": int(NOW) + s})) for cls in NOW_CLASSES[:6] for s in (-1, 1)),
    ]


PAYLOADS = _payloads()
HEAVY: list[type[Message]] = [Cluster, Listener, RouteConfiguration, ClusterLoadAssignment]
HEAVY += [hcm.HttpConnectionManager, tls_pb2.UpstreamTlsContext, tls_pb2.DownstreamTlsContext]
MAKERS: list[Callable[[int], Message]] = [make_cluster, make_listener, make_route, make_cla]


def assert_same_verdicts(message: Message, new: Checker, ref: Checker) -> None:
    """Both checkers, on the message and on a fresh decode of its bytes, without and
    with ``now``, twice (the second time through any memo)."""
    fresh = type(message).FromString(message.SerializeToString())
    for m in (message, fresh, message):
        for now in (None, NOW, NOW + 7200.0):
            assert new(m, now) == ref(m, now), (now, m)


def _differs(new: Checker, ref: Checker, messages: list[Message]) -> bool:
    return any(new(m, now) != ref(m, now) for m in messages for now in (None, NOW))


@settings(max_examples=300)
@given(st.data(), st.sampled_from(HEAVY))
def test_random_heavy_resources(data: st.DataObject, cls: type[Message]) -> None:
    message = Builder(data, PAYLOADS).message(_descriptor(cls), 0)
    assert_same_verdicts(message, _rules.check_rules, reference.check_rules)


@settings(max_examples=400)
@given(st.data(), st.sampled_from(MAKERS), st.integers(0, 50), st.integers(1, 4))
def test_mutated_realistic_resources(
    data: st.DataObject, make: Callable[[int], Message], index: int, mutations: int
) -> None:
    message = make(index)
    builder = Builder(data, PAYLOADS)
    for _ in range(mutations):
        builder.mutate(message)
    assert_same_verdicts(message, _rules.check_rules, reference.check_rules)


def _corpus() -> list[Message]:
    """Realistic resources, each with one or two rules broken by hand."""
    out: list[Message] = []
    for make in MAKERS:
        out += [make(i) for i in range(3)]
    c = make_cluster(1)
    c.name = ""
    c.connect_timeout.seconds = -1  # two failures: the field order decides
    out.append(c)
    c = make_cluster(2)
    c.health_checks[0].ClearField("timeout")
    c.circuit_breakers.thresholds[1].priority = 7  # type: ignore[assignment]
    out.append(c)
    c = make_cluster(3)
    c.metadata.filter_metadata[""].fields["x"].string_value = "y"
    out.append(c)
    c = make_cluster(4)
    c.transport_socket.typed_config.Pack(tls_pb2.UpstreamTlsContext(sni="s" * 256))
    out.append(c)
    c = make_cluster(5)
    c.outlier_detection.max_ejection_percent.value = 101
    c.ClearField("name")
    out.append(c)
    rc = make_route(1)
    rc.virtual_hosts[1].routes[2].match.headers[0].name = "bad name"
    rc.virtual_hosts[2].routes[0].route.ClearField("cluster")
    out.append(rc)
    cla = make_cla(1)
    cla.endpoints[1].lb_endpoints[3].endpoint.address.socket_address.port_value = 70000
    cla.policy.overprovisioning_factor.value = 0
    out.append(cla)
    listener = make_listener(1)
    listener.filter_chains[0].filters[0].typed_config.Pack(hcm.HttpConnectionManager())
    out.append(listener)
    # Rules against ``now`` deep inside memoised sub-messages and payloads: the same
    # bytes pass without ``now`` and fail with it (lt_now, two hours ahead).
    late = _pack(NOW_CLASSES[1](val={"seconds": int(NOW) + 7200}))
    for index in range(2):  # twice: the second time through the memos
        c = make_cluster(6 + index)
        tls = tls_pb2.UpstreamTlsContext()
        c.transport_socket.typed_config.Unpack(tls)
        handshaker = tls.common_tls_context.custom_handshaker
        handshaker.name = "h"
        handshaker.typed_config.CopyFrom(late)
        c.transport_socket.typed_config.Pack(tls)
        c.health_checks[0].event_logger.add(name="log").typed_config.CopyFrom(late)
        out.append(c)
        rc = make_route(3 + index)
        rc.virtual_hosts[0].routes[1].typed_per_filter_config["f"].CopyFrom(late)
        out.append(rc)
    return out


def test_hand_broken_resources() -> None:
    for message in _corpus():
        assert_same_verdicts(message, _rules.check_rules, reference.check_rules)


# ------------------------------------------------------------------ every field, and pairs


def _reachable(roots: list[type[Message]]) -> list[Descriptor]:
    seen: dict[str, Descriptor] = {}
    stack = [_descriptor(cls) for cls in roots]
    while stack:
        desc = stack.pop()
        if desc.full_name in seen or desc.full_name in _SKIP:
            continue
        seen[desc.full_name] = desc
        stack += [fd.message_type for fd in desc.fields if fd.message_type is not None]
    return sorted(seen.values(), key=lambda d: d.full_name)


Setter = Callable[[Message], None]


def _scalar_samples(fd: FieldDescriptor) -> list[Any]:
    """A few values of a scalar field: a likely valid one first, then likely bad ones."""
    rules = _field_rules(fd)
    kind = fd.type
    if kind == FD.TYPE_BOOL:
        return [True]
    if kind == FD.TYPE_STRING:
        named = [x for x in (_strings_of(rules) if rules is not None else []) if x]
        return [*named[:1], "a-b.c", "", "bad\nvalue\x00", "y" * 300, ":x"]
    if kind == FD.TYPE_BYTES:
        return [b"\x01" * 4, b"", b"z" * 40]
    if kind == FD.TYPE_ENUM:
        assert fd.enum_type is not None
        defined = sorted(fd.enum_type.values_by_number)
        return [defined[-1], 99]
    if kind in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
        return [1.0, -0.0, math.nan, -1.0, 1e9]
    lo, hi = _INTS[kind]
    near = [int(x) for x in _numbers(rules)] if rules is not None else []
    return [x for x in [1, *near, -1, 70000, hi] if lo <= x <= hi]


def _new(cls: type[Message], **scalars: object) -> Message:
    """``cls(**scalars)`` for a class built at run time, whose constructor's keywords the
    protobuf stubs cannot know (their ``Message`` takes none)."""
    message = cls()
    for name, value in scalars.items():
        setattr(message, name, value)
    return message


def _message_samples(desc: Descriptor) -> list[Message]:
    cls = message_factory.GetMessageClass(desc)
    full = desc.full_name
    if full in ("google.protobuf.Duration", "google.protobuf.Timestamp"):
        return [_new(cls, seconds=1), _new(cls, seconds=-1), _new(cls, nanos=1)]
    if full == "google.protobuf.Any":
        return [*PAYLOADS[1:5], *PAYLOADS[6:8]]
    if desc.fields_by_name.keys() == {"value"}:  # wrappers
        fd = desc.fields_by_name["value"]
        return [_new(cls, value=x) for x in _scalar_samples(fd)[:3]]
    filled = cls()
    for fd in desc.fields:  # each field set to its first sample, one level down
        if fd.message_type is None and not fd.is_repeated and fd.containing_oneof is None:
            with contextlib.suppress(ValueError, TypeError):
                setattr(filled, fd.name, _scalar_samples(fd)[0])
    return [filled, cls()]


def _samples(fd: FieldDescriptor) -> list[Setter]:
    """Ways to set field ``fd``, a likely valid one first."""
    name = fd.name
    out: list[Setter] = []
    entry = fd.message_type
    if entry is not None and entry.GetOptions().map_entry:
        key_fd, value_fd = entry.fields_by_name["key"], entry.fields_by_name["value"]
        keys = ["k", ""] if key_fd.type == FD.TYPE_STRING else _scalar_samples(key_fd)[:2]
        values: list[Any] = (
            _message_samples(value_fd.message_type)[:2]
            if value_fd.message_type is not None
            else _scalar_samples(value_fd)[:2]
        )
        for key in keys:
            for value in values:

                def put(m: Message, key: Any = key, value: Any = value) -> None:
                    if isinstance(value, Message):
                        getattr(m, name)[key].CopyFrom(value)
                    else:
                        getattr(m, name)[key] = value

                out.append(put)
        return out
    items: list[Any] = _message_samples(entry) if entry is not None else _scalar_samples(fd)
    if fd.is_repeated:
        for chosen in ([items[0]], items[:3], items[1:2]):

            def extend(m: Message, chosen: list[Any] = chosen) -> None:
                for item in chosen:
                    if isinstance(item, Message):
                        getattr(m, name).add().CopyFrom(item)
                    else:
                        getattr(m, name).append(item)

            out.append(extend)
        return out
    for item in items:

        def assign(m: Message, item: Any = item) -> None:
            if isinstance(item, Message):
                getattr(m, name).CopyFrom(item)
            else:
                setattr(m, name, item)

        out.append(assign)
    return out


def _sweep(desc: Descriptor) -> Iterator[Message]:
    """Messages of ``desc`` with each field set alone, then each pair of fields."""
    cls = message_factory.GetMessageClass(desc)
    fields = [(fd, _samples(fd)) for fd in desc.fields]

    def build(*setters: Setter) -> Message | None:
        message = cls()
        try:
            for setter in setters:
                setter(message)
        except (ValueError, TypeError):
            return None
        return message

    yield cls()
    for _, setters in fields:
        for setter in setters:
            if (message := build(setter)) is not None:
                yield message
    for index, (_, first) in enumerate(fields):
        for _, second in fields[index + 1 :]:
            for a in first[:2]:
                for b in second[:2]:
                    if (message := build(a, b)) is not None:
                        yield message


def test_every_field_and_every_pair_of_fields_of_every_reachable_type() -> None:
    """Each type the heavy resources reach: each field set alone to a few values, and
    each pair of fields set together (the order in which rules are tried, and the
    set-ness of each field, decide between two failures)."""
    count = 0
    for desc in _reachable(HEAVY):
        for message in _sweep(desc):
            count += 1
            assert _rules.check_rules(message) == reference.check_rules(message), message
    assert count > 25_000


def test_a_float_of_minus_zero_in_a_message_of_many_checked_fields() -> None:
    """ListFields lists a float of -0.0 (its bits are set), so the first checker tried
    its rules with the set fields; the value is false, so its "unset" failure fires
    too. No xDS message has such a field: a synthetic one."""
    cls = _many_checked_fields()
    for value in (-0.0, 0.0, 1.0, -1.0):
        for late in (0, 5):
            message = _new(cls, d=value, late=late)
            assert _rules.check_rules(message) == reference.check_rules(message)
    assert _rules.check_rules(_new(cls, d=-0.0, late=5)) == "d: must be greater than 0"


def _many_checked_fields() -> type[Message]:
    name = "xds_client_tests.differential.ManyChecked"
    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    except KeyError:
        pass
    fdp = descriptor_pb2.FileDescriptorProto(
        name="xds_client_tests/differential.proto",
        package="xds_client_tests.differential",
        syntax="proto3",
        dependency=["validate/validate.proto"],
    )
    message = fdp.message_type.add(name="ManyChecked")
    specs = [
        ("d", FDP.TYPE_DOUBLE, "double { gt: 0 }"),
        ("s", FDP.TYPE_STRING, "string { min_len: 1 }"),
    ]
    specs += [(f"x{i}", FDP.TYPE_STRING, "string { max_len: 3 }") for i in range(7)]
    specs += [("late", FDP.TYPE_INT32, "int32 { lt: 1 }")]
    for number, (field, kind, rules) in enumerate(specs, 1):
        added = message.field.add(name=field, number=number, type=kind, label=FDP.LABEL_OPTIONAL)
        added.options.Extensions[pgv.rules].CopyFrom(text_format.Parse(rules, pgv.FieldRules()))
    pool.AddSerializedFile(fdp.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def test_the_comparison_catches_a_planted_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checker that differs in one place must be told apart by the corpus: here the
    rule of a required field is tried at its place in the declaration instead of after
    the set fields, as the reference does for messages with many checked fields."""
    corpus = _corpus()
    assert not _differs(_rules.check_rules, reference.check_rules, corpus)
    monkeypatch.setattr(_rules_writer, "_ASK_EACH_UP_TO", 1000)  # every message asks each field
    # Checkers written now (the modules written at build time follow the real order).
    monkeypatch.setattr(_rules, "_COMPILER", _rules._Compiler(use_generated=False))
    assert _differs(_rules.check_rules, reference.check_rules, corpus)


# ------------------------------------------------------------------ the memo's bounds


def test_the_memo_of_verdicts_stays_within_its_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_rules_memo, "_MEMO_ENTRIES", 50)
    monkeypatch.setattr(_rules_memo, "_MEMO_BYTES", 4000)
    compiler = _rules._Compiler()
    monkeypatch.setattr(_rules, "_COMPILER", compiler)
    most_entries = most_bytes = 0
    for i in range(300):  # each with its own TLS payload, health check ...
        assert _rules.check_rules(make_cluster(i)) is None
        most_entries = max(most_entries, len(compiler.memo.entries))
        most_bytes = max(most_bytes, compiler.memo.size)
        assert compiler.memo.size == sum(len(data) for _, data in compiler.memo.entries)
    assert 0 < most_entries <= 50
    assert 0 < most_bytes <= 4000
    big = tls_pb2.UpstreamTlsContext(sni="s" * 200)  # more than a sixteenth: not kept
    cluster = make_cluster(1)
    cluster.transport_socket.typed_config.Pack(big)
    _rules.check_rules(cluster)
    assert all(len(data) <= 4000 // 16 for _, data in compiler.memo.entries)
    _rules.forget_verdicts()
    assert not compiler.memo.entries
    assert compiler.memo.size == 0


def test_a_memo_that_does_not_pay_pauses_then_tries_again(monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = _rules._Compiler()
    monkeypatch.setattr(_rules, "_COMPILER", compiler)
    for i in range(_rules_memo._MEMO_PROBATION + 10):  # each health check names its own host
        assert _rules.check_rules(make_cluster(i)) is None
    paused = [state for state in compiler.memo.states if state[2]]
    asked = [state for state in compiler.memo.states if state[1]]
    assert paused  # the health checks' (and their HTTP checks')
    assert asked  # the rest repeats across clusters (outlier detection ...) and hits
    assert all(0 < state[2] <= _rules_memo._MEMO_PAUSE for state in paused)
    for state in paused:
        state[2] = 1  # the pause ends at the next check
    assert _rules.check_rules(make_cluster(10_000)) is None
    assert all(state[2] == 0 for state in paused)
    assert _rules.check_rules(make_cluster(10_001)) is None
    assert all(state[0] == 1 for state in paused)  # asked again


# ------------------------------------------------------------------ checkers built lazily


def test_a_check_asked_while_its_checker_is_being_built_is_still_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another thread may ask for a type's checker while one builds it (simulated here
    by asking from inside the build): it gets a checker built for it, never no check."""
    compiler = _rules._Compiler(use_generated=False)  # built at run time: it takes a while
    monkeypatch.setattr(_rules, "_COMPILER", compiler)
    real = compiler._compile
    asked: list[str | None] = []
    bad = Cluster(name="svc")
    bad.connect_timeout.seconds = -1
    listener = make_listener(1)
    listener.filter_chains[0].filters[0].typed_config.Pack(hcm.HttpConnectionManager())
    reason = reference.check_rules(listener)
    assert reason is not None

    started: set[str] = set()

    def compile_while_asked(desc: Descriptor) -> Any:
        name = desc.full_name
        if name == "envoy.config.cluster.v3.Cluster" and name not in started:
            started.add(name)
            asked.append(_rules.check_rules(bad))
        if name.endswith("HttpConnectionManager") and name not in started:
            started.add(name)
            asked.append(_rules.check_rules(listener))
        return real(desc)

    monkeypatch.setattr(compiler, "_compile", compile_while_asked)
    assert _rules.check_rules(bad) == "connect_timeout: must be greater than 0s"
    assert asked == ["connect_timeout: must be greater than 0s"]
    assert _rules.check_rules(listener) == reason
    assert asked[1] == reason  # the payload's type was being built, for the listener
    assert _rules.check_rules(listener) == reason  # and then through the shared ones


def test_only_the_types_a_resource_holds_are_built() -> None:
    compiler = _rules._Compiler()
    check = compiler.for_class(Cluster)
    assert check is not None
    built = {name for name, (_, done) in compiler.built_names().items() if done}
    assert built == {"envoy.config.cluster.v3.Cluster"}
    check(make_cluster(1), [None, False, False])
    built = {name for name, (_, done) in compiler.built_names().items() if done}
    assert "envoy.config.core.v3.HealthCheck" in built  # met in the bench cluster
    assert "envoy.config.cluster.v3.Cluster.LbSubsetConfig" not in built  # never met
