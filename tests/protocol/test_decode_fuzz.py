"""Corrupt bytes reach the core as a NACK naming the field, never as an exception (#31).

The gRPC transport parses a SotW response with its resources, ``control_plane`` and
``resource_errors`` left serialized (``RawDiscoveryResponse``), so the core is the
first to decode them; a delta response arrives parsed (``DeltaDiscoveryResponse``),
with each resource's body still the bytes of its ``Any``. Whatever bytes a server
sends that the transport's parse accepts, ``receive`` must answer with exactly one
ACK or NACK.
"""

from __future__ import annotations

import os
from typing import Any

from envoy.config.core.v3.base_pb2 import ControlPlane
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryResponse,
    DiscoveryResponse,
    ResourceError,
    ResourceName,
)
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xds_client.protocol import ResponseAccepted, ResponseRejected
from xds_client.protocol._raw import parse_raw_response, raw_response_class

from ._protocol_support import (
    V3,
    WRAPPER,
    delta,
    delta_resource,
    delta_response,
    make,
    pack,
    sotw,
    sotw_response,
    wrap,
)

# XDS_CLIENT_FUZZ_EXAMPLES raises the count for a longer hunt (150 takes about a second).
FUZZ = settings(
    max_examples=int(os.environ.get("XDS_CLIENT_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def raw_sotw(**fields: Any) -> Any:
    build: Any = raw_response_class()
    message: Any = build(type_url=V3.cds, version_info="1", nonce="n1")
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)
    return message


def sotw_harness() -> Any:
    h = sotw(V3, "single")
    h.p.subscribe(V3.cds, None)
    h.start()
    return h


def only_reply(h: Any, events: list[Any], nonce: str) -> Any:
    """The one ACK or NACK ``receive`` queued, checked against its event."""
    replies = [r for r in h.flush() if r.response_nonce == nonce]
    assert len(replies) == 1, replies
    (outcome,) = [e for e in events if isinstance(e, ResponseAccepted | ResponseRejected)]
    assert isinstance(outcome, ResponseRejected) == replies[0].HasField("error_detail")
    return replies[0]


# ------------------------------------------------------------------ focused


def test_a_corrupt_control_plane_is_a_nack_naming_the_field() -> None:
    h = sotw_harness()
    events = h.receive(
        raw_sotw(
            control_plane=b"\x0a\x05ab", resources=[pack(make(V3.cds, "c")).SerializeToString()]
        )
    )
    (rejected,) = events
    assert isinstance(rejected, ResponseRejected)
    assert rejected.errors["(response)"].startswith(
        "control_plane is not a valid envoy.config.core.v3.ControlPlane"
    )
    nack = only_reply(h, events, "n1")
    assert "control_plane" in nack.error_detail.message
    assert h.p.resources(V3.cds) == {}


def test_a_corrupt_resource_error_is_a_nack_naming_its_index() -> None:
    h = sotw_harness()
    good = ResourceError(resource_name=ResourceName(name="x")).SerializeToString()
    events = h.receive(raw_sotw(resource_errors=[good, b"\x0a\xff"]))
    (rejected,) = events
    assert isinstance(rejected, ResponseRejected)
    assert rejected.errors["(response)"].startswith(
        "resource_errors[1] is not a valid envoy.service.discovery.v3.ResourceError"
    )
    only_reply(h, events, "n1")


def test_a_valid_raw_control_plane_and_resource_error_still_read() -> None:
    h = sotw_harness()
    h.receive(sotw_response(V3.cds, "1", "n0", [make(V3.cds, "a"), make(V3.cds, "b")]))
    h.flush()
    plane = ControlPlane(identifier="cp-1").SerializeToString()
    kept = ResourceError(resource_name=ResourceName(name="b")).SerializeToString()
    events = h.receive(
        raw_sotw(control_plane=plane, resource_errors=[kept],
                 resources=[pack(make(V3.cds, "a")).SerializeToString()])
    )  # fmt: skip
    (accepted,) = [e for e in events if isinstance(e, ResponseAccepted)]
    assert accepted.control_plane == "cp-1"
    assert set(h.p.resources(V3.cds)) == {"a", "b"}  # b left out with an error: kept


# ------------------------------------------------------------------ fuzzed

_PLANE = ControlPlane(identifier="cp").SerializeToString()
_ERROR = ResourceError(resource_name=ResourceName(name="c1")).SerializeToString()
_BODIES = [
    pack(make(V3.cds, "c1")).SerializeToString(),
    pack(make(V3.cds, "c2", "t")).SerializeToString(),
    wrap("c3", make(V3.cds, "c3"), version="1", ttl=5).SerializeToString(),
    wrap("c1", None, ttl=5).SerializeToString(),
]


@st.composite
def mutated(draw: st.DrawFn, blob: bytes) -> bytes:
    """``blob`` with a few bytes flipped, inserted, removed or cut off."""
    data = bytearray(blob)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if kind == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif kind == "delete" and data:
            del data[at]
        elif kind == "truncate":
            del data[at:]
    return bytes(data)


def sub_message(blob: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(st.just(blob), mutated(blob), st.binary(max_size=12))


@given(
    plane=st.one_of(st.just(b""), sub_message(_PLANE)),
    reported=st.lists(sub_message(_ERROR), max_size=2),
    resources=st.lists(st.one_of(*(sub_message(b) for b in _BODIES)), max_size=4),
)
@FUZZ
def test_sotw_raw_sub_messages_of_any_bytes_get_one_reply(
    plane: bytes, reported: list[bytes], resources: list[bytes]
) -> None:
    h = sotw_harness()
    h.receive(sotw_response(V3.cds, "1", "n0", [make(V3.cds, "c1")]))
    h.flush()
    response = raw_sotw(
        control_plane=plane, resource_errors=reported, resources=resources, nonce="n1"
    )
    only_reply(h, h.receive(response), "n1")


def _sotw_wire() -> bytes:
    response = sotw_response(V3.cds, "1", "n1", [])
    response.control_plane.identifier = "cp"
    response.resource_errors.add().resource_name.name = "c2"
    message = DiscoveryResponse.FromString(response.SerializeToString())
    data = message.SerializeToString()
    return data + b"".join(b"\x12" + bytes([len(b)]) + b for b in _BODIES)


@given(data=mutated(_sotw_wire()))
@FUZZ
def test_sotw_raw_mutated_responses_get_one_reply(data: bytes) -> None:
    try:
        response = parse_raw_response(data)
    except DecodeError:
        return  # the transport's parse refuses it: the core never sees it
    h = sotw_harness()
    h.receive(sotw_response(V3.cds, "0", "n0", [make(V3.cds, "c1")]))
    h.flush()
    events = h.receive(response)
    if response.type_url == V3.cds:
        only_reply(h, events, response.nonce)


def _delta_wire() -> bytes:
    response = delta_response(
        V3.cds,
        "n1",
        [
            delta_resource("c1", make(V3.cds, "c1"), version="1"),
            delta_resource("c2", make(V3.cds, "c2"), version="1", ttl=5),
            delta_resource("c3", None, version="1"),
        ],
        removed=["c4"],
    )
    response.control_plane.identifier = "cp"
    response.resource_errors.add().resource_name.name = "c5"
    return response.SerializeToString()


@given(data=mutated(_delta_wire()))
@FUZZ
def test_delta_mutated_responses_get_one_reply(data: bytes) -> None:
    try:
        response = DeltaDiscoveryResponse.FromString(data)
    except DecodeError:
        return  # the transport's parse refuses it: the core never sees it
    h = delta(V3, "single")
    h.p.subscribe(V3.cds, None)
    h.start()
    events = h.receive(response)
    if response.type_url == V3.cds:
        only_reply(h, events, response.nonce)


_DELTA_BODY = pack(make(V3.cds, "c1")).value


@given(
    bodies=st.lists(
        st.tuples(
            st.sampled_from(["c1", "c2", ""]),
            st.sampled_from([V3.cds, V3.eds, WRAPPER, ""]),
            st.one_of(st.none(), sub_message(_DELTA_BODY)),
            st.sampled_from([None, 5.0, -1.0]),
        ),
        max_size=3,
    )
)
@FUZZ
def test_delta_resource_bodies_of_any_bytes_get_one_reply(
    bodies: list[tuple[str, str, bytes | None, float | None]],
) -> None:
    h = delta(V3, "single")
    h.p.subscribe(V3.cds, None)
    h.start()
    resources = []
    for name, type_url, value, ttl in bodies:
        body = None if value is None else AnyProto(type_url=type_url, value=value)
        resources.append(delta_resource(name, body, version="1", ttl=ttl))
    response = delta_response(V3.cds, "n1", resources)
    only_reply(h, h.receive(response), "n1")
