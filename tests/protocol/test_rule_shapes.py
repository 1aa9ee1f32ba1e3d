"""Verdicts by shape (``protocol/_shapes.py``) against the full ``(validate.rules)`` check.

A shape may only prove that a resource passes; every verdict given with the resource's
bytes (``rules_verdict(message, now, data)``) must equal the full check's without them.
The shapes are learnt from valid variants of the realistic resources (their leaves,
payloads' too, set to values near their rules' bounds), then tried on variants with
any values, and on bytes mutated at random (those that still decode).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from google.protobuf import message_factory
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from hypothesis import given, settings
from hypothesis import strategies as st

from bench._data import make_cluster
from bench.validation import make_cla, make_listener, make_route
from xds_client.protocol import _rules, _rules_meanings
from xds_client.protocol._shapes import ShapeBook
from xds_client.resources import message_descriptor

from .test_rules_differential import _FLOATS, _INTS, _STRINGS, _field_rules, _numbers, _strings_of

MAKERS: list[Callable[[int], Message]] = [make_cluster, make_listener, make_route, make_cla]


@pytest.fixture(autouse=True)
def _fresh_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_rules, "_COMPILER", _rules._Compiler())


def _leaves(message: Message) -> Iterator[tuple[Message, FieldDescriptor, int | None]]:
    """Every set scalar below ``message`` (a repeated one item by item), payloads of
    ``Any`` excluded (see :func:`_perturb`)."""
    for fd, value in message.ListFields():
        if fd.message_type is None:
            if fd.is_repeated:
                for i in range(len(value)):
                    yield message, fd, i
            else:
                yield message, fd, None
        elif fd.message_type.GetOptions().map_entry:
            continue
        elif fd.is_repeated:
            for item in value:
                yield from _leaves(item)
        elif fd.message_type.full_name != "google.protobuf.Any":
            yield from _leaves(value)


def _payloads(message: Message) -> Iterator[AnyProto]:
    for fd, value in message.ListFields():
        if fd.message_type is None or fd.message_type.GetOptions().map_entry:
            continue
        for item in value if fd.is_repeated else [value]:
            if fd.message_type.full_name == "google.protobuf.Any":
                yield item
            else:
                yield from _payloads(item)


def _value(fd: FieldDescriptor, rng: random.Random) -> Any:
    """A value for ``fd``, often near the bounds its rules name (as the differential
    test of the checker draws them)."""
    rules = _field_rules(fd)
    near = _numbers(rules) if rules is not None else []
    kind = fd.type
    if kind == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if kind == FieldDescriptor.TYPE_STRING:
        extra = list(_strings_of(rules)) if rules is not None else []
        if rng.random() < 0.3:
            return "".join(rng.choice("az09-._~ \n\x7fé") for _ in range(rng.randrange(12)))
        return rng.choice(_STRINGS + extra)
    if kind == FieldDescriptor.TYPE_BYTES:
        return rng.choice([b"", b"ab", b"\x00" * 4, b"z" * 40])
    if kind == FieldDescriptor.TYPE_ENUM:
        assert fd.enum_type is not None
        defined = list(fd.enum_type.values_by_number)
        return rng.choice([*defined, max(defined) + 1, 99])
    if kind in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return rng.choice(_FLOATS + [float(x) for x in near])
    lo, hi = _INTS[kind]
    pool = [0, 1, -1, 2, 100, 65535, 65536, lo, hi] + [int(x) for x in near]
    return rng.choice([x for x in pool if lo <= x <= hi])


def _perturb(
    message: Message, rng: random.Random, chosen: set[int], count: list[int] | None = None
) -> None:
    """Set the leaves of ``message`` (and of its payloads) whose place in the walk is in
    ``chosen`` to drawn values."""
    count = [0] if count is None else count
    for owner, fd, index in list(_leaves(message)):
        count[0] += 1
        if count[0] - 1 not in chosen:
            continue
        value = _value(fd, rng)
        try:
            if index is None:
                setattr(owner, fd.name, value)
            else:
                getattr(owner, fd.name)[index] = value
        except (TypeError, ValueError):
            pass
    for packed in list(_payloads(message)):
        desc = message_descriptor(packed.type_url.rpartition("/")[2])
        if desc is None:
            continue
        inner = message_factory.GetMessageClass(desc).FromString(packed.value)
        _perturb(inner, rng, chosen, count)
        packed.value = inner.SerializeToString()


class Tally:
    """What a run of :func:`_compare` saw."""

    def __init__(self) -> None:
        self.compared = 0
        self.proved = 0  # by a shape, from the bytes
        self.differ: list[tuple[str | None, str | None]] = []


def _same(data: bytes, cls: type[Message], tally: Tally) -> None:
    """The verdict with ``data`` against the full check's (bytes that do not decode
    never reach a check)."""
    try:
        message = cls.FromString(data)
    except (DecodeError, RuntimeError, ValueError):
        return
    full = _rules.check_rules(cls.FromString(data))
    book = _rules._COMPILER.shapes.get(cls)
    if book is not None and book.proves(data):
        tally.proved += 1
    with_bytes = _rules.rules_verdict(message, None, data)[0]
    tally.compared += 1
    if with_bytes != full:
        tally.differ.append((with_bytes, full))


def _learn(
    make: Callable[[int], Message], rng: random.Random, index: int, chosen: set[int]
) -> type[Message]:
    """Teach the checker shapes from valid variants of ``make(index)``."""
    cls = type(make(0))
    for attempt in range(30):
        variant = make(index + attempt)
        if attempt:
            _perturb(variant, rng, chosen)
        data = variant.SerializeToString()
        if _rules.check_rules(cls.FromString(data)) is None:
            _rules.rules_verdict(cls.FromString(data), None, data)
    return cls


def _compare(make: Callable[[int], Message], index: int, seed: int, tally: Tally) -> None:
    """Shapes learnt from valid variants of ``make(index)``; then variants with any
    values, and their bytes mutated, each judged with and without its bytes."""
    _rules.forget_verdicts()
    rng = random.Random(seed)
    chosen = set(rng.sample(range(80), rng.randint(1, 12)))  # the leaves that vary
    cls = _learn(make, rng, index, chosen)
    for _ in range(6):
        variant = make(index + 100)
        _perturb(variant, rng, set(rng.sample(sorted(chosen), rng.randint(1, len(chosen)))))
        raw = variant.SerializeToString()
        _same(raw, cls, tally)
        wild = make(index + 200)  # every leaf drawn: fields that break rules, mostly
        _perturb(wild, rng, set(range(400)))
        _same(_mutated(raw, wild, rng), cls, tally)


def _fields(message: Message) -> list[bytes]:
    """``message``'s top-level fields, each serialized alone."""
    out = []
    for fd, _ in message.ListFields():
        alone = type(message)()
        alone.MergeFrom(message)
        for other, _ in alone.ListFields():
            if other.number != fd.number:
                alone.ClearField(other.name)
        out.append(alone.SerializeToString())
    return out


def _mutated(raw: bytes, variant: Message, rng: random.Random) -> bytes:
    """``raw`` changed at the byte level: a byte replaced, added, removed, or nudged by
    one or two (lengths, varints); or a field of ``variant`` (perturbed, its bytes
    alone) added at the end, or at a field's start inside."""
    mutated = bytearray(raw)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(mutated))
        kind = rng.randrange(5)
        if kind == 0:
            mutated[at] = rng.randrange(256)
        elif kind == 1:
            mutated.insert(at, rng.randrange(256))
        elif kind == 2:
            del mutated[at]
        elif kind == 3:
            mutated[at] = (mutated[at] + rng.choice([-2, -1, 1, 2])) % 256
        else:
            fields = _fields(variant)
            if fields:
                extra = rng.choice(fields)
                where = rng.choice([len(mutated), at])
                mutated[where:where] = extra
    return bytes(mutated)


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(MAKERS), st.integers(0, 40), st.integers(0, 2**32))
def test_a_verdict_from_the_bytes_is_the_full_checks(
    make: Callable[[int], Message], index: int, seed: int
) -> None:
    tally = Tally()
    _compare(make, index, seed, tally)
    assert not tally.differ


def _seeded_run() -> Tally:
    tally = Tally()
    for seed in range(40):
        _compare(MAKERS[seed % len(MAKERS)], seed, seed, tally)
    return tally


def test_the_comparison_proves_many_and_catches_a_planted_bug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tally = _seeded_run()
    assert not tally.differ
    assert tally.proved >= tally.compared // 5, (tally.proved, tally.compared)
    # Holes whose values are not checked: the comparison must see it.
    monkeypatch.setattr(_rules, "_HOOKS", _rules._HOOKS._replace(hole_lines=_no_checks))
    broken = _seeded_run()
    assert broken.differ
    assert all(with_bytes is None for with_bytes, _ in broken.differ)


def _no_checks(*args: Any) -> list[str] | None:
    lines = _rules_meanings._hole_lines(*args)
    return None if lines is None else []


def _book(cls: type[Message]) -> ShapeBook:
    return _rules._COMPILER.shapes[cls]


def _verdict(message: Message) -> str | None:
    data = message.SerializeToString()
    return _rules.rules_verdict(type(message).FromString(data), None, data)[0]


def _proves(message: Message) -> bool:
    book = _rules._COMPILER.shapes.get(type(message))
    return book is not None and book.proves(message.SerializeToString())


def test_template_made_clusters_are_proved_from_their_bytes() -> None:
    for i in range(4):
        assert _verdict(make_cluster(i)) is None
    assert len(_book(Cluster).shapes) == 1
    assert all(_proves(make_cluster(i)) for i in range(10, 60))
    longer = make_cluster(5)
    longer.name = "a-much-longer-name-than-the-template-" * 5  # lengths read from the bytes
    assert _proves(longer)
    assert _verdict(longer) is None


@pytest.mark.parametrize("make", MAKERS, ids=lambda make: make.__name__)
def test_template_made_resources_of_every_kind_are_proved(make: Callable[[int], Message]) -> None:
    for i in range(4):
        assert _verdict(make(i)) is None
    # Their names, domains and clusters grow by a digit (and more): read from the bytes.
    assert all(_proves(make(i)) for i in (*range(5, 40), 999, 12345))


def test_a_hole_that_breaks_a_rule_gets_the_full_checks_verdict() -> None:
    for i in range(4):
        _verdict(make_cluster(i))
    unnamed = make_cluster(7)
    unnamed.name = ""  # the name's hole: min_len 1 (and the name is gone from the bytes)
    assert _verdict(unnamed) == "name: length must be at least 1 characters"
    long_sni = make_cluster(8)
    long_sni.transport_socket.typed_config.Pack(
        tls_pb2.UpstreamTlsContext(
            sni="s" * 300,
            common_tls_context=tls_pb2.CommonTlsContext(alpn_protocols=["h2", "http/1.1"]),
        )
    )
    assert not _proves(long_sni)
    assert _verdict(long_sni) == (
        "transport_socket.typed_config.(envoy.extensions.transport_sockets.tls.v3"
        ".UpstreamTlsContext).sni: length must be at most 255 bytes"
    )
    newline = make_cluster(9)
    newline.health_checks[0].http_health_check.host = "bad\nhost"
    assert not _proves(newline)
    assert _verdict(newline) == _rules.check_rules(newline) is not None


def test_a_payload_string_that_is_not_utf8_is_not_proved() -> None:
    for i in range(4):
        _verdict(make_cluster(i))
    cluster = make_cluster(11)
    data = bytearray(cluster.SerializeToString())
    sni = cluster.transport_socket.typed_config
    inner = tls_pb2.UpstreamTlsContext.FromString(sni.value)
    at = data.rfind(inner.sni.encode())  # the last: the EDS service name is the same
    data[at] = 0xFF  # inside the TLS payload: the cluster still decodes
    message = Cluster.FromString(bytes(data))
    assert not _book(Cluster).proves(bytes(data))
    verdict = _rules.rules_verdict(message, None, bytes(data))[0]
    assert verdict is not None
    assert "cannot decode" in verdict


def test_numbers_enums_and_wrappers_vary_under_their_rules() -> None:
    def cla(i: int, port: int = 8080, factor: int = 140) -> ClusterLoadAssignment:
        made = make_cla(i)
        for group in made.endpoints:
            for endpoint in group.lb_endpoints:
                endpoint.endpoint.address.socket_address.port_value = port
        made.policy.overprovisioning_factor.value = factor
        return made

    for i, (port, factor) in enumerate([(8080, 140), (9090, 150), (7070, 120), (80, 200)]):
        assert _verdict(cla(i, port, factor)) is None
    assert _proves(cla(20, 443, 130))
    too_big = cla(21, 70000, 130)  # port_value: lte 65535
    assert not _proves(too_big)
    assert _verdict(too_big) == _rules.check_rules(too_big) is not None
    for i in range(4):
        cluster = make_cluster(i)
        cluster.lb_policy = [Cluster.LEAST_REQUEST, Cluster.ROUND_ROBIN, Cluster.RANDOM][i % 3]
        assert _verdict(cluster) is None
    undefined = make_cluster(30)
    undefined.lb_policy = 99  # type: ignore[assignment]  # defined_only
    assert not _proves(undefined)
    assert _verdict(undefined) == "lb_policy: must be one of the defined enum values"


def test_no_shape_from_a_resource_with_a_singular_field_twice() -> None:
    twice = [
        make_cluster(i).SerializeToString() + Cluster(name=f"again-{i}").SerializeToString()
        for i in range(6)
    ]
    for data in twice:
        assert _rules.rules_verdict(Cluster.FromString(data), None, data)[0] is None
    book = _book(Cluster)
    assert not book.shapes


def test_no_shape_holds_a_payload_of_a_type_not_judged() -> None:
    unknown = AnyProto(type_url="type.googleapis.com/no.such.Type", value=b"\x08\x01")
    for i in range(6):
        cluster = make_cluster(i)
        cluster.transport_socket.typed_config.CopyFrom(unknown)
        assert _verdict(cluster) is None
    assert not _book(Cluster).shapes


def test_no_shape_is_learnt_from_a_check_against_now() -> None:
    from .test_validation_rules import NOW, NOW_CLASSES

    cls = NOW_CLASSES[0]
    for s in range(6):
        message = cls(val={"seconds": int(NOW) - 10 - s})
        data = message.SerializeToString()
        _rules.rules_verdict(cls.FromString(data), NOW, data)
    book = _rules._COMPILER.shapes.get(cls)
    assert book is None or not book.shapes


def test_unique_items_and_map_keys_stay_as_learnt() -> None:
    routes = [make_route(i) for i in range(6)]
    for route in routes:
        assert _verdict(route) is None
    assert _book(RouteConfiguration).shapes
    twice = make_route(50)
    twice.virtual_hosts[0].domains[1] = twice.virtual_hosts[0].domains[0]
    assert _verdict(twice) == _rules.check_rules(twice)
    cluster_a, cluster_b = make_cluster(1), make_cluster(2)
    for i, cluster in enumerate((cluster_a, cluster_b, make_cluster(3))):
        cluster.metadata.filter_metadata["bench"]["revision"] = f"r{i}"
        _verdict(cluster)
    renamed = make_cluster(4)
    del renamed.metadata.filter_metadata["bench"]
    renamed.metadata.filter_metadata[""]["x"] = 1  # an empty key: keys must not be empty
    assert _verdict(renamed) == _rules.check_rules(renamed) is not None


def test_a_shape_is_widened_by_a_resource_that_differs_in_more_leaves() -> None:
    for i in range(3):
        _verdict(make_cluster(i))
    other = make_cluster(3)
    other.metadata.filter_metadata["bench"]["owner"] = "someone-else"
    assert not _proves(other)
    assert _verdict(other) is None  # passes the full check: the shape gains a hole
    again = make_cluster(4)
    again.metadata.filter_metadata["bench"]["owner"] = "a-third-owner"
    assert _proves(again)
    assert len(_book(Cluster).shapes) == 1


def _resolving(name: str, resolvers: int) -> Cluster:
    """A cluster of ``resolvers`` DNS resolvers: as many structures as counts."""
    cluster = Cluster(name=name)
    for _ in range(resolvers):
        resolver = cluster.dns_resolvers.add().socket_address
        resolver.address, resolver.port_value = "10.0.0.1", 53
    return cluster


def test_learning_pauses_where_no_shape_is_made() -> None:
    for i in range(300):  # each of its own structure: no two make a shape
        assert _verdict(_resolving(f"c{i}", i)) is None
    book = _book(Cluster)
    assert not book.shapes
    assert book.learns <= 10  # parsed: paused longer after each miss (1, 2, 4, ...)


def test_shapes_that_keep_changing_pay_for_their_learning() -> None:
    from xds_client.protocol import _shapes

    structures = _shapes._SHAPES_PER_TYPE + 4  # more than are kept: each evicts another
    for i in range(2000):  # three in a row of each structure: a shape each time
        assert _verdict(_resolving(f"cluster-{i}", i // 3 % structures)) is None
    assert _book(Cluster).learns <= 200  # 1,333 (two in three) if every shape reset the pause


def test_bytes_after_the_shape_are_not_proved() -> None:
    for i in range(4):
        _verdict(make_cluster(i))
    data = make_cluster(12).SerializeToString() + b"\x0a\x00"  # then name: "" (the last wins)
    assert not _book(Cluster).proves(data)
    assert _rules.rules_verdict(Cluster.FromString(data), None, data)[0] == (
        "name: length must be at least 1 characters"
    )


def test_every_byte_nudged_gets_the_full_checks_verdict() -> None:
    """Each byte of a template-made cluster moved by -3..3: lengths of messages that
    end elsewhere, tags of other fields, other values. Those that decode get the full
    check's verdict, many of them a failure."""
    for i in range(4):
        _verdict(make_cluster(i))
    raw = make_cluster(13).SerializeToString()
    failures = proved = 0
    for at in range(len(raw)):
        for delta in (-3, -2, -1, 1, 2, 3):
            data = bytearray(raw)
            data[at] = (data[at] + delta) % 256
            moved = bytes(data)
            try:
                full = _rules.check_rules(Cluster.FromString(moved))
            except DecodeError:
                continue
            proved += _book(Cluster).proves(moved)
            assert _rules.rules_verdict(Cluster.FromString(moved), None, moved)[0] == full
            failures += full is not None
    assert failures > 50
    assert proved > 50


def test_a_message_whose_length_moves_its_end_is_not_proved() -> None:
    def route(i: int) -> RouteConfiguration:
        made = make_route(i)
        for host in made.virtual_hosts:
            host.ClearField("retry_policy")  # its routes come last, a short one at the end
            host.routes.add(name="z").match.prefix = "/"
            host.routes[-1].route.cluster = f"c{i}"
        return made

    for i in range(4):
        assert _verdict(route(i)) is None
    config = route(13)
    host = config.virtual_hosts[0]
    whole = host.SerializeToString()
    last = type(host)(routes=[host.routes[-1]]).SerializeToString()
    raw = config.SerializeToString()
    length = _varint_bytes(len(whole))
    at = raw.find(b"\x12" + length + whole)
    assert at >= 0
    # The virtual host ends before its last route, whose bytes (field 3) are then read
    # as the configuration's field 3: internal_only_headers, a string, not a header name.
    shorter = _varint_bytes(len(whole) - len(last))
    assert len(shorter) == len(length)
    moved = raw[: at + 1] + shorter + raw[at + 1 + len(length) :]
    full = _rules.check_rules(RouteConfiguration.FromString(moved))
    assert full is not None
    assert full.startswith("internal_only_headers[0]: ")
    assert not _book(RouteConfiguration).proves(moved)
    assert _rules.rules_verdict(RouteConfiguration.FromString(moved), None, moved)[0] == full


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def test_bytes_that_are_no_resource_fit_no_shape() -> None:
    for i in range(4):
        _verdict(make_cluster(i))
    book = _book(Cluster)
    raw = make_cluster(5).SerializeToString()
    for data in (
        b"",
        b"\x0a",
        b"\x0a" + b"\xff" * 12,
        raw[:-1],
        raw[:17] + b"\xff" * 12 + raw[18:],  # the length of eds_cluster_config
    ):
        assert not book.proves(data)
