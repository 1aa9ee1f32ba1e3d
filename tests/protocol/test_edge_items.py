"""The smaller protocol edges of issue #13, each with a test that failed before."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.service.discovery.v3.discovery_pb2 import ResourceName

from xds_client.protocol import (
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
)
from xds_client.protocol._raw import to_raw_response

from ._protocol_support import (
    V3,
    delta,
    delta_resource,
    delta_response,
    make,
    names,
    pack,
    sotw,
    sotw_response,
    wrap,
)


def kinds(events: list[Any]) -> list[type]:
    return [type(e) for e in events]


# ------------------------------------------------------------------ TTL


@pytest.mark.parametrize("kind", ["sotw", "delta"])
def test_a_heartbeat_without_ttl_removes_the_timer(kind: str) -> None:
    # The seed (discovery.proto, Resource.ttl): "If the resource is received with no
    # TTL set, the timer is removed for the resource."
    h: Any = sotw(V3, "single") if kind == "sotw" else delta(V3, "single")
    h.p.subscribe(V3.eds, ["a"])
    h.start()
    body = make(V3.eds, "a")
    if kind == "sotw":
        h.receive(sotw_response(V3.eds, "1", "n1", [wrap("a", body, version="1", ttl=30)]))
        events = h.receive(sotw_response(V3.eds, "2", "n2", [wrap("a", None, version="1")]))
    else:
        h.receive(delta_response(V3.eds, "n1", [delta_resource("a", body, version="1", ttl=30)]))
        events = h.receive(delta_response(V3.eds, "n2", [delta_resource("a", None, version="1")]))
    assert kinds(events) == [ResponseAccepted]
    assert h.p.resources(V3.eds)["a"].ttl_deadline is None
    assert h.advance(100) == []


@pytest.mark.parametrize("kind", ["sotw", "delta"])
def test_a_negative_ttl_is_nacked(kind: str) -> None:
    h: Any = sotw(V3, "single") if kind == "sotw" else delta(V3, "single")
    h.p.subscribe(V3.eds, ["a", "b"])
    h.start()
    a, b = make(V3.eds, "a"), make(V3.eds, "b")
    if kind == "sotw":
        response: Any = sotw_response(
            V3.eds, "1", "n1", [wrap("a", a, ttl=-5), wrap("b", b, ttl=10)]
        )
    else:
        response = delta_response(
            V3.eds, "n1", [delta_resource("a", a, ttl=-5), delta_resource("b", b, ttl=10)]
        )
    events = h.receive(response)
    (rejected,) = [e for e in events if isinstance(e, ResponseRejected)]
    assert rejected.errors == {"a": "ttl -5s is negative"}
    assert names(events, ResourceUpdated) == ["b"]


# ------------------------------------------------------------------ SotW heartbeat


def test_sotw_heartbeat_matching_the_response_version_is_accepted_as_envoy_does() -> None:
    # Envoy takes a bodiless wrapper as a heartbeat when its version equals the
    # type's accepted version_info; the resource itself may carry no version.
    h = sotw(V3, "single")
    h.p.subscribe(V3.eds, ["a"])
    h.start()
    h.receive(sotw_response(V3.eds, "7", "n1", [wrap("a", make(V3.eds, "a"), ttl=30)]))
    h.flush()
    h.advance(20)
    events = h.receive(sotw_response(V3.eds, "7", "n2", [wrap("a", None, version="7", ttl=30)]))
    assert kinds(events) == [ResponseAccepted]
    assert h.p.resources(V3.eds)["a"].ttl_deadline == 50.0


def test_sotw_heartbeat_matching_nothing_is_still_nacked() -> None:
    h = sotw(V3, "single")
    h.p.subscribe(V3.eds, ["a"])
    h.start()
    h.receive(sotw_response(V3.eds, "7", "n1", [wrap("a", make(V3.eds, "a"), ttl=30)]))
    events = h.receive(sotw_response(V3.eds, "8", "n2", [wrap("a", None, version="6", ttl=30)]))
    assert kinds(events) == [ResponseRejected]


@pytest.mark.parametrize("raw", [False, True], ids=["parsed", "raw"])
def test_sotw_heartbeat_with_no_version_in_the_accepted_response_version_is_kept(
    raw: bool,
) -> None:
    # Issue #31: Envoy (SotW) compares the *response's* version_info with the accepted
    # one; the wrapper's own version is not read. go-control-plane's heartbeats carry
    # none, so "heartbeat version '' does not match held version '1'" was a false NACK.
    h = sotw(V3, "single")
    h.p.subscribe(V3.eds, ["a"])
    h.start()
    h.receive(sotw_response(V3.eds, "1", "n1", [wrap("a", make(V3.eds, "a"), version="1", ttl=30)]))
    h.flush()
    h.advance(20)
    beat = sotw_response(V3.eds, "1", "n2", [wrap("a", None, ttl=30)])
    events = h.receive(to_raw_response(beat) if raw else beat)
    assert kinds(events) == [ResponseAccepted]
    (ack,) = h.flush()
    assert ack.version_info == "1"
    assert not ack.HasField("error_detail")
    assert h.p.resources(V3.eds)["a"].ttl_deadline == 50.0


@pytest.mark.parametrize("raw", [False, True], ids=["parsed", "raw"])
def test_sotw_heartbeat_only_response_removes_no_other_listener_or_cluster(raw: bool) -> None:
    # go-control-plane's SotW heartbeat holds only the resources that have a TTL
    # (PEERS.md: Envoy then wiped every other cluster). Absence from a response made
    # only of heartbeats at the accepted version is not a deletion.
    h = sotw(V3, "single")
    h.p.subscribe(V3.cds, None)
    h.start()
    h.receive(
        sotw_response(
            V3.cds, "1", "n1",
            [wrap("c1", make(V3.cds, "c1"), ttl=10), pack(make(V3.cds, "c2"))],
        )
    )  # fmt: skip
    h.flush()
    h.advance(8)
    beat = sotw_response(V3.cds, "1", "n2", [wrap("c1", None, ttl=10)])
    events = h.receive(to_raw_response(beat) if raw else beat)
    assert kinds(events) == [ResponseAccepted]
    assert set(h.p.resources(V3.cds)) == {"c1", "c2"}
    assert h.p.resources(V3.cds)["c1"].ttl_deadline == 18.0
    # A real SotW update still deletes what it leaves out.
    events = h.receive(sotw_response(V3.cds, "2", "n3", [pack(make(V3.cds, "c2"))]))
    assert names(events, ResourceRemoved) == ["c1"]


def test_sotw_bodiless_wrapper_in_a_new_response_version_is_not_a_heartbeat() -> None:
    # Envoy: no body and a version_info other than the accepted one is no heartbeat.
    h = sotw(V3, "single")
    h.p.subscribe(V3.eds, ["a"])
    h.start()
    h.receive(sotw_response(V3.eds, "1", "n1", [wrap("a", make(V3.eds, "a"), version="1")]))
    events = h.receive(sotw_response(V3.eds, "2", "n2", [wrap("a", None)]))
    assert kinds(events) == [ResponseRejected]


# ------------------------------------------------------------------ delta


def test_delta_name_removed_twice_is_nacked() -> None:
    h = delta(V3, "single")
    h.p.subscribe(V3.cds, None)
    h.start()
    h.receive(delta_response(V3.cds, "n1", [delta_resource("a", make(V3.cds, "a"))]))
    events = h.receive(delta_response(V3.cds, "n2", removed=["a", "a"]))
    (rejected,) = events
    assert isinstance(rejected, ResponseRejected)
    assert "'a' is removed more than once" in rejected.errors["(response)"]
    assert "a" in h.p.resources(V3.cds)


def test_delta_tp2_resource_name_is_read_instead_of_nacking() -> None:
    h = delta(V3, "single")
    h.p.subscribe(V3.cds, ["a", "b"])
    h.start()
    resource = delta_resource("", make(V3.cds, "a"), version="1")
    resource.resource_name.CopyFrom(ResourceName(name="a"))
    events = h.receive(delta_response(V3.cds, "n1", [resource]))
    assert names(events, ResourceUpdated) == ["a"]
    assert kinds(events)[-1] is ResponseAccepted
    # removed_resource_names (TP2) removes, like removed_resources.
    response = delta_response(V3.cds, "n2")
    response.removed_resource_names.add(name="a")
    events = h.receive(response)
    assert names(events, ResourceRemoved) == ["a"]
    response = delta_response(V3.cds, "n3")
    response.removed_resource_names.add(name="b")
    assert names(h.receive(response), ResourceDoesNotExist) == ["b"]


# ------------------------------------------------------------------ A30


@pytest.mark.parametrize("kind", ["sotw", "delta"])
def test_a30_the_v2_transport_accepts_v3_typed_resources(kind: str) -> None:
    from ._protocol_support import V2, pack

    h: Any = sotw(V2, "single") if kind == "sotw" else delta(V2, "single")
    h.p.subscribe(V2.cds, None)
    h.start()
    v3_body = pack(make(V3.cds, "a"))  # an Any typed envoy.config.cluster.v3.Cluster
    if kind == "sotw":
        events = h.receive(sotw_response(V2.cds, "1", "n1", [v3_body]))
    else:
        events = h.receive(delta_response(V2.cds, "n1", [delta_resource("a", v3_body)]))
    assert kinds(events) == [ResourceUpdated, ResponseAccepted]
    (updated,) = [e for e in events if isinstance(e, ResourceUpdated)]
    assert updated.resource.DESCRIPTOR.full_name == "envoy.api.v2.Cluster"
    assert updated.resource.name == "a"


def test_a30_a_really_different_type_is_still_rejected() -> None:
    from ._protocol_support import V2, pack

    h = sotw(V2, "single")
    h.p.subscribe(V2.cds, None)
    h.start()
    events = h.receive(sotw_response(V2.cds, "1", "n1", [pack(make(V3.lds, "l"))]))
    assert kinds(events) == [ResponseRejected]


# ------------------------------------------------------------------ bare vs wrapped bytes


@pytest.mark.parametrize("raw", [False, True])
def test_bare_bytes_equal_to_a_wrapped_resource_under_another_name_are_not_a_duplicate(
    raw: bool,
) -> None:
    from xds_client.protocol._raw import to_raw_response

    h = sotw(V3, "single")
    h.p.subscribe(V3.cds, None)
    h.start()
    body = make(V3.cds, "b")  # its own name is "b"
    first = sotw_response(V3.cds, "1", "n1", [wrap("w", body)])  # served as "w"
    h.receive(to_raw_response(first) if raw else first)
    assert set(h.p.resources(V3.cds)) == {"w"}
    h.flush()
    # The same bytes, bare this time: that is the resource "b", not a second "w".
    second = sotw_response(V3.cds, "2", "n2", [wrap("w", body), body])
    events = h.receive(to_raw_response(second) if raw else second)
    assert kinds(events)[-1] is ResponseAccepted, events
    assert names(events, ResourceUpdated) == ["b"]
    assert set(h.p.resources(V3.cds)) == {"w", "b"}
