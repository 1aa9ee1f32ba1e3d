"""``Resource.metadata`` and the response's ``control_plane.identifier`` reach the events
and the CSDS states (delta, SotW wrapped, SotW raw), and are None/"" when absent."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.core.v3.base_pb2 import ControlPlane, Metadata
from google.protobuf.struct_pb2 import Struct

from xds_client.protocol import ResourceUpdated, SotwProtocol
from xds_client.protocol._raw import to_raw_response
from xds_client.resources import unwrap

from ._protocol_support import (
    V3,
    Harness,
    delta,
    delta_resource,
    delta_response,
    make,
    pack,
    sotw,
    sotw_response,
)


def metadata(value: str) -> Metadata:
    md = Metadata()
    fields = Struct()
    fields.update({"owner": value})
    md.filter_metadata["team"].CopyFrom(fields)
    return md


@pytest.fixture(params=["sotw", "raw", "delta"])
def kind(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def push(h: Harness[Any], kind: str, nonce: str, md: Metadata | None, plane: str) -> list[Any]:
    body = make(V3.cds, "a", nonce)
    if kind == "delta":
        res = delta_resource("a", body, version=nonce)
        if md is not None:
            res.metadata.CopyFrom(md)
        response: Any = delta_response(V3.cds, nonce, [res])
    else:
        packed = pack(body)  # bare: no wrapper, no metadata
        if md is not None:
            wrapper = delta_resource("a", body, version=nonce)
            wrapper.metadata.CopyFrom(md)
            packed = pack(wrapper)
        response = sotw_response(V3.cds, nonce, nonce, [packed])
    if plane:
        response.control_plane.CopyFrom(ControlPlane(identifier=plane))
    if kind == "raw":
        response = to_raw_response(response)
    return h.receive(response)


def harness(kind: str) -> Harness[Any]:
    made: Harness[Any] = (delta if kind == "delta" else sotw)(V3, "single")
    made.p.subscribe(V3.cds, ["a"])
    made.start()
    return made


def test_metadata_and_control_plane_reach_the_update(kind: str) -> None:
    h = harness(kind)
    (update, _) = push(h, kind, "1", metadata("blue"), "cp-1")
    assert isinstance(update, ResourceUpdated)
    assert update.metadata == metadata("blue")
    assert update.control_plane == "cp-1"
    assert "control_plane='cp-1'" in repr(update)
    (state,) = h.p.resource_states(V3.cds)
    assert state.control_plane == "cp-1"


def test_absent_they_are_none_and_empty(kind: str) -> None:
    h = harness(kind)
    (update, _) = push(h, kind, "1", None, "")
    assert isinstance(update, ResourceUpdated)
    assert update.metadata is None
    assert update.control_plane == ""
    (state,) = h.p.resource_states(V3.cds)
    assert state.control_plane == ""


def test_the_states_show_the_last_accepted_control_plane() -> None:
    h = harness("sotw")
    push(h, "sotw", "1", None, "cp-1")
    h.flush()
    push(h, "sotw", "2", None, "cp-2")
    assert [s.control_plane for s in h.p.resource_states(V3.cds)] == ["cp-2"]
    assert isinstance(h.p, SotwProtocol)


def test_unwrap_gives_the_wrappers_metadata() -> None:
    wrapper = delta_resource("a", make(V3.cds, "a"))
    assert unwrap(pack(wrapper)).metadata is None
    wrapper.metadata.CopyFrom(metadata("red"))
    assert unwrap(pack(wrapper)).metadata == metadata("red")
