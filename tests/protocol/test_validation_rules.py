"""Resources checked against their protos' ``(validate.rules)``, as Envoy checks them.

The table follows protoc-gen-validate's test harness (tests/harness/cases/*.proto
and executor/cases.go): one small message per rule, with a field ``val`` that
carries it, and values that must pass or fail. The messages are built here from
descriptors, so no generated code is needed.
"""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.base_pb2 import Node
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from google.protobuf.wrappers_pb2 import UInt32Value
from validate import validate_pb2 as pgv

import xds_client
from xds_client import resources
from xds_client.errors import ResourceValidationError, RuleViolationError
from xds_client.protocol import (
    ProtocolConfig,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
    _validation,
    validate,
)
from xds_client.protocol._rules import check_rules, forget_verdicts, rules_verdict
from xds_client.testing import ControlPlane

from ._protocol_support import V3, delta, delta_resource, delta_response, sotw, sotw_response

FDP = descriptor_pb2.FieldDescriptorProto
PACKAGE = "xds_client_tests.pgv_cases"

# (field declaration, rules in text format, value given to ``val`` (None: unset), valid?)
CASES: list[tuple[str, str, Any, bool]] = [
    # numbers
    ("float", "", 1.5, True),
    ("float", "float { const: 1.23 }", 1.23, True),
    ("double", "double { lt: inf }", 1e300, True),  # an infinite bound compiles too
    ("double", "double { gt: -inf lt: inf }", float("inf"), False),
    ("float", "float { const: 1.23 }", 3.21, False),
    ("double", "double { in: [4.56, 7.89] }", 7.89, True),
    ("double", "double { in: [4.56, 7.89] }", 10.11, False),
    ("double", "double { not_in: [0] }", 1, True),
    ("double", "double { not_in: [0] }", 0, False),
    ("int32", "int32 { lt: 0 }", -1, True),
    ("int32", "int32 { lt: 0 }", 0, False),
    ("int32", "int32 { lte: 64 }", 64, True),
    ("int32", "int32 { lte: 64 }", 65, False),
    ("int64", "int64 { gt: 16 }", 17, True),
    ("int64", "int64 { gt: 16 }", 16, False),
    ("int64", "int64 { gte: 8 }", 8, True),
    ("int64", "int64 { gte: 8 }", 7, False),
    ("uint32", "uint32 { gt: 0 lt: 10 }", 5, True),  # inside (0, 10)
    ("uint32", "uint32 { gt: 0 lt: 10 }", 10, False),
    ("uint32", "uint32 { gt: 0 lt: 10 }", 0, False),
    ("sint32", "sint32 { gt: 10 lt: 0 }", 11, True),  # exclusive: outside [0, 10]
    ("sint32", "sint32 { gt: 10 lt: 0 }", -1, True),
    ("sint32", "sint32 { gt: 10 lt: 0 }", 5, False),
    ("sint32", "sint32 { gt: 10 lt: 0 }", 10, False),
    ("fixed64", "fixed64 { gte: 128 lte: 256 }", 128, True),
    ("fixed64", "fixed64 { gte: 128 lte: 256 }", 256, True),
    ("fixed64", "fixed64 { gte: 128 lte: 256 }", 257, False),
    ("sfixed64", "sfixed64 { gte: 256 lte: 128 }", 128, True),
    ("sfixed64", "sfixed64 { gte: 256 lte: 128 }", 200, False),
    ("uint64", "uint64 { gt: 200 ignore_empty: true }", 0, True),  # empty is skipped
    ("uint64", "uint64 { gt: 200 ignore_empty: true }", 100, False),
    ("uint32", "uint32 { gte: 1 }", None, False),  # proto3: unset is 0, and 0 is checked
    ("bool", "bool { const: true }", True, True),
    ("bool", "bool { const: true }", False, False),
    # strings
    ("string", 'string { const: "foo" }', "foo", True),
    ("string", 'string { const: "foo" }', "bar", False),
    ("string", "string { len: 3 }", "été", True),  # characters, not bytes
    ("string", "string { len: 3 }", "ab", False),
    ("string", "string { min_len: 3 }", "abc", True),
    ("string", "string { min_len: 3 }", "ab", False),
    ("string", "string { min_len: 1 }", None, False),
    ("string", "string { max_len: 3 }", "abcd", False),
    ("string", "string { min_bytes: 4 }", "été", True),  # 5 bytes
    ("string", "string { max_bytes: 4 }", "été", False),
    ("string", 'string { pattern: "(?i)^[a-z0-9]+$" }', "a1B2", True),
    ("string", 'string { pattern: "(?i)^[a-z0-9]+$" }', "a-b", False),
    ("string", 'string { prefix: "foo" }', "foobar", True),
    ("string", 'string { prefix: "foo" }', "barfoo", False),
    ("string", 'string { suffix: "bar" }', "foobar", True),
    ("string", 'string { suffix: "bar" }', "barfoo", False),
    ("string", 'string { contains: "bar" }', "foobarbaz", True),
    ("string", 'string { contains: "bar" }', "foobaz", False),
    ("string", 'string { not_contains: "bar" }', "foobarbaz", False),
    ("string", 'string { in: ["bar", "baz"] }', "baz", True),
    ("string", 'string { in: ["bar", "baz"] }', "foo", False),
    ("string", 'string { not_in: ["fizz"] }', "fizz", False),
    ("string", "string { email: true }", "foo@bar.com", True),
    ("string", "string { email: true }", "John <foo@bar.com>", True),
    ("string", "string { email: true }", "foobar", False),
    ("string", "string { email: true }", "foo@-bar.com", False),
    ("string", "string { hostname: true }", "example.com", True),
    ("string", "string { hostname: true }", "-bad-.com", False),
    ("string", "string { hostname: true }", "a" * 64 + ".com", False),
    ("string", "string { ip: true }", "192.168.0.1", True),
    ("string", "string { ip: true }", "::1", True),
    ("string", "string { ip: true }", "foo", False),
    ("string", "string { ipv4: true }", "192.168.0.1", True),
    ("string", "string { ipv4: true }", "::1", False),
    ("string", "string { ipv6: true }", "2001:db8::1", True),
    ("string", "string { ipv6: true }", "127.0.0.1", False),
    ("string", "string { uri: true }", "https://example.com/foo/bar?baz=quux", True),
    ("string", "string { uri: true }", "!@#$%^&*", False),
    ("string", "string { uri: true }", "/foo/bar", False),  # relative
    ("string", "string { uri_ref: true }", "/foo/bar", True),
    ("string", "string { address: true }", "example.com", True),
    ("string", "string { address: true }", "2001:db8::1", True),
    ("string", "string { address: true }", "-not-", False),
    ("string", "string { uuid: true }", "F97ECB3E-1E1B-4E3C-9B7F-0FFE4D3C5E1A", True),
    ("string", "string { uuid: true }", "not-a-uuid", False),
    ("string", "string { well_known_regex: HTTP_HEADER_NAME }", "x-request-id", True),
    ("string", "string { well_known_regex: HTTP_HEADER_NAME }", ":path", True),
    ("string", "string { well_known_regex: HTTP_HEADER_NAME }", "bad header", False),
    ("string", "string { well_known_regex: HTTP_HEADER_VALUE }", "a\tb", True),
    ("string", "string { well_known_regex: HTTP_HEADER_VALUE }", "a\nb", False),
    ("string", "string { well_known_regex: HTTP_HEADER_VALUE strict: false }", "a\x01b", True),
    ("string", "string { min_len: 3 ignore_empty: true }", "", True),
    # bytes
    ("bytes", "bytes { min_len: 3 }", b"abc", True),
    ("bytes", "bytes { min_len: 3 }", b"ab", False),
    ("bytes", 'bytes { prefix: "\\x99" }', b"\x99abc", True),
    ("bytes", 'bytes { prefix: "\\x99" }', b"abc", False),
    ("bytes", "bytes { ipv4: true }", b"\x7f\x00\x00\x01", True),
    ("bytes", "bytes { ipv4: true }", b"\x7f\x00", False),
    # enums (TestEnum: ZERO=0, ONE=1, TWO=2)
    ("TestEnum", "enum { defined_only: true }", 2, True),
    ("TestEnum", "enum { defined_only: true }", 7, False),
    ("TestEnum", "enum { const: 2 }", 1, False),
    ("TestEnum", "enum { in: [0, 2] }", 1, False),
    ("TestEnum", "enum { not_in: [1] }", 1, False),
    # messages (Embed: int64 val > 0), skip, required
    ("Embed", "", "embed:1", True),
    ("Embed", "", "embed:0", False),  # its own rules, recursively
    ("Embed", "", None, True),
    ("Embed", "message { required: true }", None, False),
    ("Embed", "message { skip: true }", "embed:0", True),
    # repeated
    ("repeated int32", "repeated { min_items: 2 }", [1, 2], True),
    ("repeated int32", "repeated { min_items: 2 }", [1], False),
    ("repeated int32", "repeated { min_items: 1 }", None, False),
    ("repeated int32", "repeated { max_items: 2 }", [1, 2, 3], False),
    ("repeated int32", "repeated { unique: true }", [1, 2, 1], False),
    ("repeated int32", "repeated { items { int32 { gt: 0 } } }", [1, 2], True),
    ("repeated int32", "repeated { items { int32 { gt: 0 } } }", [1, 0], False),
    ("repeated int32", "repeated { min_items: 2 ignore_empty: true }", [], True),
    ("repeated Embed", "", ["embed:1", "embed:0"], False),
    ("repeated Embed", "repeated { items { message { skip: true } } }", ["embed:0"], True),
    # maps
    ("map<string,int32>", "map { min_pairs: 2 }", {"a": 1, "b": 2}, True),
    ("map<string,int32>", "map { min_pairs: 2 }", {"a": 1}, False),
    ("map<string,int32>", "map { max_pairs: 1 }", {"a": 1, "b": 2}, False),
    ("map<string,int32>", "map { keys { string { min_len: 2 } } }", {"ab": 1}, True),
    ("map<string,int32>", "map { keys { string { min_len: 2 } } }", {"a": 1}, False),
    ("map<string,int32>", "map { values { int32 { gt: 0 } } }", {"a": 0}, False),
    ("map<string,Embed>", "", {"a": "embed:0"}, False),
    # well-known types
    ("UInt32Value", "uint32 { gt: 3 }", "u32:4", True),
    ("UInt32Value", "uint32 { gt: 3 }", "u32:3", False),
    ("UInt32Value", "uint32 { gt: 3 }", None, True),  # unset wrapper: not checked
    ("Duration", "duration { required: true }", None, False),
    ("Duration", "duration { gt { } }", "dur:1", True),
    ("Duration", "duration { gt { } }", "dur:0", False),
    ("Duration", "duration { gt { } }", "dur:-1", False),
    ("Duration", "duration { lt { seconds: 1 } gte { nanos: 1000 } }", "dur:0.5", True),
    ("Duration", "duration { lt { seconds: 1 } gte { nanos: 1000 } }", "dur:1", False),
    ("Duration", "duration { in: [{ seconds: 1 }, { nanos: 1000 }] }", "dur:1", True),
    ("Duration", "duration { in: [{ seconds: 1 }, { nanos: 1000 }] }", "dur:2", False),
    ("Duration", "duration { const: { seconds: 3 } }", "dur:3", True),
    # a lower bound alone is settled by whole seconds when it can be, by nanos otherwise
    ("Duration", "duration { gte { seconds: 1 nanos: 500000000 } }", "dur:1.4", False),
    ("Duration", "duration { gte { seconds: 1 nanos: 500000000 } }", "dur:1.5", True),
    ("Duration", "duration { gte { seconds: 1 nanos: 500000000 } }", "dur:2", True),
    ("Duration", "duration { gt { seconds: -2 } }", "dur:-1.5", True),
    ("Duration", "duration { gt { seconds: -2 } }", "dur:-2.5", False),
    ("Timestamp", "timestamp { required: true }", None, False),
    ("Timestamp", "timestamp { gt { seconds: 16 } }", "ts:17", True),
    ("Timestamp", "timestamp { gt { seconds: 16 } }", "ts:16", False),
    ("Any", "any { required: true }", None, False),
    ("Any", 'any { in: ["type.googleapis.com/google.protobuf.Duration"] }', "any:dur", True),
    ("Any", 'any { in: ["type.googleapis.com/google.protobuf.Duration"] }', "any:ts", False),
    ("Any", 'any { not_in: ["type.googleapis.com/google.protobuf.Timestamp"] }', "any:ts", False),
    ("Any", "", "any:embed:0", False),  # the payload's own rules
    ("Any", "", "any:embed:1", True),
]

# PGV's timestamp rules against the current time (harness: wkt_timestamp.proto, with
# the values of executor/cases.go as seconds from ``NOW``; None is the epoch).
NOW = 1_700_000_000.0
NOW_CASES: list[tuple[str, float | None, bool]] = [
    ("timestamp { lt_now: true }", None, True),
    ("timestamp { lt_now: true }", 7200, False),
    ("timestamp { gt_now: true }", 7200, True),
    ("timestamp { gt_now: true }", None, False),
    ("timestamp { within { seconds: 3600 } }", 0, True),
    ("timestamp { within { seconds: 3600 } }", None, False),
    ("timestamp { within { seconds: 3600 } }", 7200, False),
    ("timestamp { lt_now: true within { seconds: 3600 } }", -1800, True),
    ("timestamp { lt_now: true within { seconds: 3600 } }", 1800, False),
    ("timestamp { lt_now: true within { seconds: 3600 } }", -7200, False),
    ("timestamp { gt_now: true within { seconds: 3600 } }", 1800, True),
    ("timestamp { gt_now: true within { seconds: 3600 } }", -1800, False),
    ("timestamp { gt_now: true within { seconds: 3600 } }", 7200, False),
]


def _field(message: descriptor_pb2.DescriptorProto, decl: str, rules: str) -> None:
    field = message.field.add(name="val", number=1, label=FDP.LABEL_OPTIONAL)
    scalars = {
        "float": FDP.TYPE_FLOAT, "double": FDP.TYPE_DOUBLE, "int32": FDP.TYPE_INT32,
        "int64": FDP.TYPE_INT64, "uint32": FDP.TYPE_UINT32, "uint64": FDP.TYPE_UINT64,
        "sint32": FDP.TYPE_SINT32, "fixed64": FDP.TYPE_FIXED64,
        "sfixed64": FDP.TYPE_SFIXED64, "bool": FDP.TYPE_BOOL, "string": FDP.TYPE_STRING,
        "bytes": FDP.TYPE_BYTES,
    }  # fmt: skip
    messages = {
        "Embed": f".{PACKAGE}.Embed",
        "UInt32Value": ".google.protobuf.UInt32Value",
        "Duration": ".google.protobuf.Duration",
        "Timestamp": ".google.protobuf.Timestamp",
        "Any": ".google.protobuf.Any",
    }

    def set_type(target: descriptor_pb2.FieldDescriptorProto, kind: str) -> None:
        if kind in scalars:
            target.type = scalars[kind]
        elif kind == "TestEnum":
            target.type = FDP.TYPE_ENUM
            target.type_name = f".{PACKAGE}.TestEnum"
        else:
            target.type = FDP.TYPE_MESSAGE
            target.type_name = messages[kind]

    if decl.startswith("repeated "):
        field.label = FDP.LABEL_REPEATED
        set_type(field, decl.removeprefix("repeated "))
    elif decl.startswith("map<"):
        key, value = decl[4:-1].split(",")
        entry = message.nested_type.add(name="ValEntry")
        entry.options.map_entry = True
        for number, (name, kind) in enumerate((("key", key), ("value", value)), 1):
            part = entry.field.add(name=name, number=number, label=FDP.LABEL_OPTIONAL)
            set_type(part, kind)
        field.label = FDP.LABEL_REPEATED
        field.type = FDP.TYPE_MESSAGE
        field.type_name = f".{PACKAGE}.{message.name}.ValEntry"
    else:
        set_type(field, decl)
    if rules:
        field.options.Extensions[pgv.rules].CopyFrom(text_format.Parse(rules, pgv.FieldRules()))


def _build_cases() -> list[type[Any]]:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="xds_client_tests/pgv_cases.proto", package=PACKAGE, syntax="proto3"
    )
    fdp.dependency.extend(
        [
            "validate/validate.proto",
            "google/protobuf/any.proto",
            "google/protobuf/duration.proto",
            "google/protobuf/timestamp.proto",
            "google/protobuf/wrappers.proto",
        ]
    )
    enum = fdp.enum_type.add(name="TestEnum")
    for number, name in enumerate(("ZERO", "ONE", "TWO")):
        enum.value.add(name=name, number=number)
    embed = fdp.message_type.add(name="Embed")
    _field(embed, "int64", "int64 { gt: 0 }")
    for index, (decl, rules, _, _) in enumerate(CASES):
        _field(fdp.message_type.add(name=f"Case{index}"), decl, rules)
    for index, (rules, _, _) in enumerate(NOW_CASES):
        _field(fdp.message_type.add(name=f"NowCase{index}"), "Timestamp", rules)
    # A required oneof, as in the harness's oneofs.proto.
    oneof = fdp.message_type.add(name="OneOfRequired")
    oneof.oneof_decl.add(name="choice").options.Extensions[pgv.required] = True
    for number, name in enumerate(("x", "y"), 1):
        oneof.field.add(
            name=name, number=number, label=FDP.LABEL_OPTIONAL, type=FDP.TYPE_STRING, oneof_index=0
        )
    # A message with validation disabled, as in the harness's messages.proto.
    off = fdp.message_type.add(name="Disabled")
    off.options.Extensions[pgv.disabled] = True
    _field(off, "int64", "int64 { gt: 0 }")
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(fdp.name)
    except KeyError:
        pool.AddSerializedFile(fdp.SerializeToString())
    names = [f"Case{i}" for i in range(len(CASES))] + ["Embed", "OneOfRequired", "Disabled"]
    names += [f"NowCase{i}" for i in range(len(NOW_CASES))]
    return [
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{n}")) for n in names
    ]


_ALL_CLASSES = _build_cases()
CLASSES = _ALL_CLASSES[: len(CASES) + 3]
NOW_CLASSES = _ALL_CLASSES[len(CASES) + 3 :]
EMBED, ONEOF_REQUIRED, DISABLED = CLASSES[-3:]


def _value(spec: Any) -> Any:
    """Values written as short strings for messages: ``embed:1``, ``dur:0.5`` ..."""
    if isinstance(spec, str) and ":" in spec and spec.split(":", 1)[0] in (
        "embed", "u32", "dur", "ts", "any",
    ):  # fmt: skip
        kind, _, rest = spec.partition(":")
        if kind == "embed":
            return EMBED(val=int(rest))
        if kind == "u32":
            return UInt32Value(value=int(rest))
        if kind == "dur":
            duration = Duration()
            duration.FromNanoseconds(int(float(rest) * 1e9))
            return duration
        if kind == "ts":
            return Timestamp(seconds=int(rest))
        packed = AnyProto()
        packed.Pack(
            _value(rest) if ":" in rest else Duration(seconds=1) if rest == "dur" else Timestamp()
        )
        return packed
    if isinstance(spec, list):
        return [_value(v) for v in spec]
    if isinstance(spec, dict):
        return {k: _value(v) for k, v in spec.items()}
    return spec


@pytest.mark.parametrize(
    ("index", "decl", "rules", "value", "valid"),
    [(i, *case) for i, case in enumerate(CASES)],
    ids=[f"{i}-{d}-{r or 'none'}-{v!r}"[:80] for i, (d, r, v, _) in enumerate(CASES)],
)
def test_harness_case(index: int, decl: str, rules: str, value: Any, valid: bool) -> None:
    cls = CLASSES[index]
    message = cls() if value is None else cls(val=_value(value))
    if valid:
        validate(message)
        return
    with pytest.raises(RuleViolationError) as caught:
        validate(message)
    assert caught.value.path.startswith("val"), caught.value.path


def _now_case(index: int, offset: float | None) -> Any:
    stamp = Timestamp(seconds=0 if offset is None else int(NOW + offset))
    return NOW_CLASSES[index](val=stamp)


@pytest.mark.parametrize(
    ("index", "rules", "offset", "valid"),
    [(i, *case) for i, case in enumerate(NOW_CASES)],
    ids=[f"{i}-{r}-{o}" for i, (r, o, _) in enumerate(NOW_CASES)],
)
def test_timestamp_rules_against_now(
    index: int, rules: str, offset: float | None, valid: bool
) -> None:
    message = _now_case(index, offset)
    validate(message)  # without ``now`` these rules are not checked: no clock is read
    validate(NOW_CLASSES[index]())  # unset: not checked
    if valid:
        validate(message, now=NOW)
        return
    with pytest.raises(RuleViolationError, match="now") as caught:
        validate(message, now=NOW)
    assert caught.value.path == "val"


def test_timestamp_now_rules_name_the_bound() -> None:
    with pytest.raises(RuleViolationError) as caught:
        validate(_now_case(9, -7200), now=NOW)
    assert caught.value.reason == "must be less than now within 3600s"
    assert check_rules(_now_case(1, 7200), NOW) == "val: must be less than now"


def test_the_core_gives_the_now_rules_the_drivers_wall_time() -> None:
    message = _now_case(1, 7200)  # lt_now, two hours ahead of NOW
    type_url = "type.googleapis.com/" + message.DESCRIPTOR.full_name
    config = ProtocolConfig(node=Node(id="n"), wall_time=lambda monotonic: NOW + monotonic)
    check = _validation.resource_check(config, type_url, 0.0)
    assert check is not None
    assert check(message) == "val: must be less than now"
    later = _validation.resource_check(config, type_url, 3 * 3600.0)  # now past the value
    assert later is not None
    assert later(message) is None
    unset = _validation.resource_check(ProtocolConfig(node=Node(id="n")), type_url, 0.0)
    assert unset is not None
    assert unset(message) is None


def test_required_oneof_and_disabled_messages() -> None:
    with pytest.raises(RuleViolationError, match="choice: is required"):
        validate(ONEOF_REQUIRED())
    validate(ONEOF_REQUIRED(y="set"))
    validate(DISABLED(val=-5))  # (validate.disabled): nothing is checked


# ------------------------------------------------------------------ Envoy messages


def bad_cluster(name: str = "svc") -> Cluster:
    cluster = Cluster(name=name)
    cluster.connect_timeout.seconds = -1
    return cluster


def test_validate_names_the_resource_and_the_field_path() -> None:
    with pytest.raises(RuleViolationError) as caught:
        xds_client.validate(bad_cluster())
    assert str(caught.value) == "cluster 'svc': connect_timeout: must be greater than 0s"
    assert caught.value.path == "connect_timeout"
    assert caught.value.message_type == "envoy.config.cluster.v3.Cluster"
    assert isinstance(caught.value, ResourceValidationError)


def test_paths_go_through_repeated_fields_and_any_payloads() -> None:
    cluster = Cluster(name="svc")
    cluster.load_assignment.cluster_name = "svc"
    address = (
        cluster.load_assignment.endpoints.add().lb_endpoints.add().endpoint.address.socket_address
    )
    address.address = "10.0.0.1"
    address.port_value = 70000
    with pytest.raises(RuleViolationError) as caught:
        validate(cluster)
    assert caught.value.path == (
        "load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value"
    )
    assert caught.value.reason == "must be less than or equal to 65535"

    listener = Listener(name="in")
    listener.address.socket_address.address = "0.0.0.0"
    listener.address.socket_address.port_value = 8080
    chain_filter = listener.filter_chains.add().filters.add(name="hcm")
    chain_filter.typed_config.Pack(hcm.HttpConnectionManager(stat_prefix="in"))
    with pytest.raises(RuleViolationError) as caught:
        validate(listener)
    assert caught.value.path == (
        "filter_chains[0].filters[0].typed_config"
        ".(envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager)"
        ".route_specifier"
    )
    chain_filter.typed_config.Pack(hcm.HttpConnectionManager(rds=hcm.Rds(route_config_name="r")))
    with pytest.raises(RuleViolationError, match=r"\)\.stat_prefix: length must be at least 1"):
        validate(listener)


def test_valid_resources_pass() -> None:
    cluster = Cluster(name="svc", type=Cluster.EDS)
    cluster.connect_timeout.seconds = 1
    cluster.eds_cluster_config.eds_config.ads.SetInParent()
    validate(cluster)
    # RouteMatch.safe_regex is "required", but only as the chosen member of its oneof.
    route = RouteConfiguration(name="r")
    host = route.virtual_hosts.add(name="all", domains=["*"])
    entry = host.routes.add()
    entry.match.prefix = "/"
    entry.route.cluster = "svc"
    validate(route)
    entry.match.safe_regex.regex = ""
    with pytest.raises(RuleViolationError, match=r"match\.safe_regex\.regex: length must be"):
        validate(route)


# ------------------------------------------------------------------ in the protocol core


@pytest.mark.parametrize("mode", ["ads", "single"])
def test_sotw_nacks_a_cluster_envoy_would_reject_and_keeps_the_rest(mode: str) -> None:
    h = sotw(V3, mode)
    h.p.subscribe(V3.cds, None)
    h.start()
    good = Cluster(name="good")
    events = h.receive(sotw_response(V3.cds, "1", "n1", [good, bad_cluster()]))
    rejected = [e for e in events if isinstance(e, ResponseRejected)]
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == ["good"]
    assert rejected[0].errors == {"svc": "connect_timeout: must be greater than 0s"}
    (nack,) = [r for r in h.flush() if r.type_url == V3.cds]
    assert "svc: connect_timeout: must be greater than 0s" in nack.error_detail.message


def test_reject_whole_response_still_applies() -> None:
    h = sotw(V3, "single", reject_whole_response=True)
    h.p.subscribe(V3.cds, None)
    h.start()
    events = h.receive(sotw_response(V3.cds, "1", "n1", [Cluster(name="good"), bad_cluster()]))
    assert not [e for e in events if isinstance(e, ResourceUpdated)]


@pytest.mark.parametrize("mode", ["ads", "single"])
def test_delta_nacks_a_cluster_envoy_would_reject(mode: str) -> None:
    h = delta(V3, mode)
    h.p.subscribe(V3.cds, None)
    h.start()
    events = h.receive(
        delta_response(
            V3.cds,
            "n1",
            [
                delta_resource("good", Cluster(name="good"), version="1"),
                delta_resource("svc", bad_cluster(), version="1"),
            ],
        )
    )
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == ["good"]
    (rejected,) = [e for e in events if isinstance(e, ResponseRejected)]
    assert rejected.errors == {"svc": "connect_timeout: must be greater than 0s"}


def test_validate_rules_off_accepts_what_envoy_rejects() -> None:
    h = sotw(V3, "single", validate_rules=False)
    h.p.subscribe(V3.cds, None)
    h.start()
    events = h.receive(sotw_response(V3.cds, "1", "n1", [bad_cluster()]))
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == ["svc"]


def test_rules_run_before_the_user_validator() -> None:
    seen: list[str] = []

    def user(message: Any) -> None:
        seen.append(message.name)

    h = sotw(V3, "single", validators={V3.cds: user})
    h.p.subscribe(V3.cds, None)
    h.start()
    h.receive(sotw_response(V3.cds, "1", "n1", [Cluster(name="good"), bad_cluster()]))
    assert seen == ["good"]


def test_only_changed_resources_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    real = rules_verdict

    def counting(
        message: Any, now: float | None = None, data: bytes | None = None
    ) -> tuple[str | None, bool]:
        checked.append(message.name)
        return real(message, now, data)

    monkeypatch.setattr(_validation, "rules_verdict", counting)
    h = sotw(V3, "single")
    h.p.subscribe(V3.cds, None)
    h.start()
    a, b = Cluster(name="a"), Cluster(name="b")
    h.receive(sotw_response(V3.cds, "1", "n1", [a, b]))
    assert sorted(checked) == ["a", "b"]
    checked.clear()
    b2 = Cluster(name="b", alt_stat_name="changed")
    events = h.receive(sotw_response(V3.cds, "2", "n2", [a, b2]))
    assert checked == ["b"]  # the unchanged bytes of "a" are not decoded nor checked
    assert any(isinstance(e, ResponseAccepted) for e in events)


# ------------------------------------------------------------------ ControlPlane


def test_control_plane_refuses_invalid_resources_when_asked() -> None:
    with ControlPlane(validate_resources=True, rest_port=None, heartbeat_interval=None) as cp:
        with pytest.raises(RuleViolationError, match="cluster 'svc': connect_timeout"):
            cp.set_resources(resources.CLUSTER, [bad_cluster()])
        with pytest.raises(RuleViolationError):
            cp.update("cds", [bad_cluster("other")])
        assert cp.resources(resources.CLUSTER) == {}
        cp.set_resources(resources.CLUSTER, [Cluster(name="fine")])
    with ControlPlane(rest_port=None, heartbeat_interval=None) as cp:
        cp.set_resources(resources.CLUSTER, [bad_cluster()])  # by default served as given


# ------------------------------------------------------------------ upb's arena


def test_the_verdict_says_when_the_check_read_an_unset_container() -> None:
    # Reading an unset repeated or map field makes upb add an empty array to the
    # message's arena (about 370 B on a Cluster), so a kept message is decoded again.
    bare = Cluster(name="c")  # no health_checks, filters, ... (they carry rules)
    assert rules_verdict(bare) == (None, True)
    from envoy.type.v3.percent_pb2 import Percent

    assert rules_verdict(Percent(value=50.0)) == (None, False)  # rules, no containers
    assert rules_verdict(Percent(value=150.0)) == (
        "value: must be inside range [0, 100]",
        False,
    )


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
@pytest.mark.parametrize("lean", [False, True])
def test_a_message_whose_check_grew_it_is_not_the_one_kept(
    monkeypatch: pytest.MonkeyPatch, protocol: str, lean: bool
) -> None:
    checked: list[Any] = []  # held, so that no id is reused
    real = rules_verdict
    forget_verdicts()  # no shape learnt by an earlier test proves these from their bytes

    def recording(
        message: Any, now: float | None = None, data: bytes | None = None
    ) -> tuple[str | None, bool]:
        checked.append(message)
        return real(message, now, data)

    monkeypatch.setattr(_validation, "rules_verdict", recording)
    h = (sotw if protocol == "sotw" else delta)(V3, "single", lazy_decode=lean)
    h.p.subscribe(V3.cds, None)
    h.start()
    sent = [Cluster(name="a"), Cluster(name="b", alt_stat_name="b")]
    if protocol == "sotw":
        events = h.receive(sotw_response(V3.cds, "1", "n1", sent))
    else:
        events = h.receive(delta_response(V3.cds, "n1", [delta_resource(m.name, m) for m in sent]))
    assert [c.name for c in checked] == ["a", "b"]
    kept = h.p.resources(V3.cds)
    updates = [e for e in events if isinstance(e, ResourceUpdated)]
    assert [e.resource for e in updates] == sent
    for message in sent:
        held = kept[message.name].resource
        assert held == message
        assert all(held is not c for c in checked)  # a fresh decode, not the grown one
    if not lean:
        for event in updates:
            assert event.resource is kept[event.name].resource  # one message, shared
