"""xRFC TP3 ``resource_errors``: errors the server reports per resource.

NOT_FOUND means the resource does not exist; any other code keeps what is cached
and reports the error (CSDS ``RECEIVED_ERROR``). Either way the name arrived, so
its does-not-exist timer stops. The response itself is ACKed.
"""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3.discovery_pb2 import ResourceError
from google.rpc.status_pb2 import Status

from xds_client.client._csds import build_client_config
from xds_client.protocol import (
    ResourceDoesNotExist,
    ResourceErrorReported,
    ResourceRemoved,
    ResponseAccepted,
    SotwProtocol,
)

from ._protocol_support import (
    V3,
    Harness,
    delta,
    delta_resource,
    delta_response,
    make,
    names,
    sotw,
    sotw_response,
)

NOT_FOUND, INTERNAL, UNAVAILABLE = 5, 13, 14


@pytest.fixture(params=["sotw", "delta"])
def h(request: pytest.FixtureRequest) -> Harness[Any]:
    make_harness = sotw if request.param == "sotw" else delta
    harness: Harness[Any] = make_harness(V3, "single", does_not_exist_timeout=10.0)
    return harness


def respond(
    h: Harness[Any], nonce: str, bodies: list[str], errors: list[tuple[str, int, str]]
) -> list[Any]:
    if isinstance(h.p, SotwProtocol):
        response: Any = sotw_response(V3.cds, nonce, nonce, [make(V3.cds, n) for n in bodies])
    else:
        response = delta_response(
            V3.cds, nonce, [delta_resource(n, make(V3.cds, n), version=nonce) for n in bodies]
        )
    for name, code, message in errors:
        error = ResourceError(error_detail=Status(code=code, message=message))
        error.resource_name.name = name
        response.resource_errors.append(error)
    return h.receive(response)


def status_of(h: Harness[Any], name: str) -> Any:
    return next(s for s in h.p.resource_states(V3.cds) if s.name == name)


def test_an_error_for_a_name_never_received_is_reported_and_stops_its_timer(
    h: Harness[Any],
) -> None:
    h.p.subscribe(V3.cds, ["a", "b"])
    h.start()
    events = respond(h, "1", ["b"], [("a", UNAVAILABLE, "backend down")])
    assert ResourceErrorReported(V3.cds, "a", UNAVAILABLE, "backend down") in events
    assert isinstance(events[-1], ResponseAccepted)
    state = status_of(h, "a")
    assert state.status == "RECEIVED_ERROR"
    assert state.error == "UNAVAILABLE: backend down"
    h.flush()
    assert names(h.advance(11), ResourceDoesNotExist) == []


def test_an_error_for_a_cached_resource_keeps_it(h: Harness[Any]) -> None:
    h.p.subscribe(V3.cds, None)
    h.start()
    respond(h, "1", ["a", "b"], [])
    # SotW CDS is full state: "a" left out of the list but named in resource_errors
    # is not deleted.
    events = respond(h, "2", ["b"], [("a", INTERNAL, "oops")])
    assert names(events, ResourceRemoved) == []
    assert names(events, ResourceErrorReported) == ["a"]
    assert "a" in h.p.resources(V3.cds)
    assert status_of(h, "a").status == "RECEIVED_ERROR"
    # A valid update clears the error.
    respond(h, "3", ["a", "b"], [])
    events = respond(h, "4", ["a", "b"], [])
    assert status_of(h, "a").status == "ACKED"
    del events


def test_not_found_means_does_not_exist_at_once(h: Harness[Any]) -> None:
    h.p.subscribe(V3.cds, ["a", "gone"])
    h.start()
    respond(h, "1", ["a"], [])
    events = respond(h, "2", ["a"], [("gone", NOT_FOUND, "")])
    assert names(events, ResourceDoesNotExist) == ["gone"]
    assert status_of(h, "gone").status == "DOES_NOT_EXIST"
    events = respond(h, "3", [], [("a", NOT_FOUND, "deleted")])
    assert names(events, ResourceRemoved) == ["a"]


def test_errors_for_names_nobody_asked_for_are_ignored(h: Harness[Any]) -> None:
    h.p.subscribe(V3.cds, ["a"])
    h.start()
    events = respond(h, "1", ["a"], [("other", UNAVAILABLE, "x")])
    assert names(events, ResourceErrorReported) == []


def test_csds_shows_received_error() -> None:
    h = sotw(V3, "single")
    h.p.subscribe(V3.cds, ["a"])
    h.start()
    respond(h, "1", [], [("a", UNAVAILABLE, "backend down")])
    states = h.p.resource_states(V3.cds)
    config = build_client_config(Node(id="n"), [(s, None) for s in states], lambda t: t)
    (generic,) = config.generic_xds_configs
    assert generic.client_status == 5  # RECEIVED_ERROR
    assert generic.error_state.details == "UNAVAILABLE: backend down"


@pytest.mark.parametrize("raw", [False, True])
def test_the_control_plane_identifier_reaches_the_events(h: Harness[Any], raw: bool) -> None:
    from envoy.config.core.v3.base_pb2 import ControlPlane

    from xds_client.protocol import ResponseRejected
    from xds_client.protocol._raw import to_raw_response

    from ._protocol_support import bad_any, wrap

    h.p.subscribe(V3.cds, None)
    h.start()
    if isinstance(h.p, SotwProtocol):
        good: Any = sotw_response(V3.cds, "1", "n1", [make(V3.cds, "a")])
        bad: Any = sotw_response(V3.cds, "2", "n2", [wrap("a", bad_any(V3.cds))])
    else:
        if raw:
            pytest.skip("the raw form is SotW's")
        good = delta_response(V3.cds, "n1", [delta_resource("a", make(V3.cds, "a"))])
        bad = delta_response(V3.cds, "n2", [delta_resource("a", bad_any(V3.cds))])
    for response in (good, bad):
        response.control_plane.CopyFrom(ControlPlane(identifier="cp-7"))
    if raw:
        good, bad = to_raw_response(good), to_raw_response(bad)
    accepted = h.receive(good)[-1]
    assert isinstance(accepted, ResponseAccepted)
    assert accepted.control_plane == "cp-7"
    h.flush()
    rejected = h.receive(bad)[-1]
    assert isinstance(rejected, ResponseRejected)
    assert rejected.control_plane == "cp-7"
