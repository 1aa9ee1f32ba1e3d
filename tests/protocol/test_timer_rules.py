"""TTL and timer rules 17-18 of the protocol core issue, for SotW and delta alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryRequest, DiscoveryRequest
from google.protobuf.message import Message

from xds_client.protocol import (
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ResponseAccepted,
    SotwProtocol,
)

from ._protocol_support import (
    Api,
    Harness,
    delta,
    delta_resource,
    delta_response,
    make,
    names,
    sotw,
    sotw_response,
    wrap,
)

# (name, resource version, body or None for a heartbeat, ttl)
Item = tuple[str, str, Message | None, float | None]


@pytest.fixture(params=["sotw", "delta"])
def kind(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def harness(kind: str, api: Api, mode: str, **config: Any) -> Harness[Any]:
    return sotw(api, mode, **config) if kind == "sotw" else delta(api, mode, **config)


def respond(h: Harness[Any], type_url: str, nonce: str, items: Sequence[Item]) -> list[Any]:
    """Send resources as SotW ``Resource`` wrappers or delta resources."""
    if isinstance(h.p, SotwProtocol):
        response: Any = sotw_response(
            type_url,
            f"v-{nonce}",
            nonce,
            [wrap(n, body, version=v, ttl=ttl) for n, v, body, ttl in items],
        )
    else:
        response = delta_response(
            type_url,
            nonce,
            [delta_resource(n, body, version=v, ttl=ttl) for n, v, body, ttl in items],
        )
    return h.receive(response)


def test_rule_17_ttl_deadline_heartbeat_and_expiry(kind: str, api: Api, mode: str) -> None:
    h = harness(kind, api, mode)
    h.p.subscribe(api.eds, ["a"])
    h.start()
    body = make(api.eds, "a")
    respond(h, api.eds, "n1", [("a", "1", body, 30.0)])
    assert h.p.resources(api.eds)["a"].ttl_deadline == 30.0
    assert h.p.next_deadline() == 30.0
    h.flush()
    assert h.advance(20) == []
    # A heartbeat: no body, same version, its TTL. No update event, but still ACKed.
    events = respond(h, api.eds, "n2", [("a", "1", None, 30.0)])
    assert [type(e) for e in events] == [ResponseAccepted]
    (ack,) = h.flush()
    assert ack.response_nonce == "n2"
    assert not ack.HasField("error_detail")
    assert h.p.next_deadline() == 50.0
    assert h.advance(25) == []  # t=45: would have expired without the heartbeat
    events = h.advance(10)  # t=55
    assert events == [ResourceRemoved(api.eds, "a", "ttl_expired")]
    assert h.p.resources(api.eds) == {}
    assert h.p.next_deadline() is None


def test_rule_17_update_without_ttl_clears_deadline(kind: str, api: Api, mode: str) -> None:
    h = harness(kind, api, mode)
    h.p.subscribe(api.eds, ["a"])
    h.start()
    respond(h, api.eds, "n1", [("a", "1", make(api.eds, "a"), 30.0)])
    events = respond(h, api.eds, "n2", [("a", "2", make(api.eds, "a"), None)])
    assert names(events, ResourceUpdated) == []  # same bytes: no event
    assert h.p.resources(api.eds)["a"].ttl_deadline is None
    assert h.p.next_deadline() is None
    assert h.advance(100) == []


def test_rule_17_sotw_heartbeat_only_response_keeps_everything(api: Api, mode: str) -> None:
    # Envoy wipes every cluster on a heartbeat-only SotW response; we refresh instead.
    h = sotw(api, mode)
    h.p.subscribe(api.cds, None)
    h.start()
    respond(
        h,
        api.cds,
        "n1",
        [("c1", "1", make(api.cds, "c1"), 10.0), ("c2", "1", make(api.cds, "c2"), 10.0)],
    )
    h.advance(8)
    events = respond(h, api.cds, "n2", [("c1", "1", None, 10.0), ("c2", "1", None, 10.0)])
    assert [type(e) for e in events] == [ResponseAccepted]
    assert set(h.p.resources(api.cds)) == {"c1", "c2"}
    assert h.advance(8) == []
    assert sorted(names(h.advance(3), ResourceRemoved)) == ["c1", "c2"]


def test_rule_17_heartbeat_with_other_version_is_rejected(kind: str, api: Api, mode: str) -> None:
    h = harness(kind, api, mode)
    h.p.subscribe(api.eds, ["a"])
    h.start()
    respond(h, api.eds, "n1", [("a", "1", make(api.eds, "a"), 30.0)])
    events = respond(h, api.eds, "n2", [("a", "2", None, None)])
    assert "a" in events[-1].errors
    assert h.p.resources(api.eds)["a"].ttl_deadline == 30.0


def test_rule_18_timer_starts_only_when_request_sent(kind: str, api: Api, mode: str) -> None:
    h = harness(kind, api, mode, does_not_exist_timeout=5.0)
    h.p.subscribe(api.eds, ["a"])
    if not h.p.is_connected:
        assert h.p.requests_to_send() == []  # nothing to send without a stream
        stray: Any = (
            DiscoveryRequest(type_url=api.eds, resource_names=["a"])
            if kind == "sotw"
            else DeltaDiscoveryRequest(type_url=api.eds, resource_names_subscribe=["a"])
        )
        h.p.request_sent(stray, h.now)  # a request "sent" while disconnected starts nothing
        assert h.p.next_deadline() is None
        h.p.connected(h.now)
    reqs = h.p.requests_to_send()
    assert h.p.next_deadline() is None  # built, but not on the wire yet
    h.now = 2.0
    for req in reqs:
        h.p.request_sent(req, h.now)
    assert h.p.next_deadline() == 7.0
    assert h.advance(4.9) == []
    assert h.advance(0.2) == [ResourceDoesNotExist(api.eds, "a")]
    (state,) = h.p.resource_states(api.eds)
    assert state.status == "DOES_NOT_EXIST"
    # It can still arrive later.
    events = respond(h, api.eds, "n1", [("a", "1", make(api.eds, "a"), None)])
    assert names(events, ResourceUpdated) == ["a"]
    assert h.p.resource_states(api.eds)[0].status == "ACKED"


def test_rule_18_timer_cancelled_on_arrival(kind: str, api: Api, mode: str) -> None:
    h = harness(kind, api, mode)
    h.p.subscribe(api.eds, ["a", "b"])
    h.start()
    assert h.p.next_deadline() == 15.0  # the default timeout
    respond(h, api.eds, "n1", [("a", "1", make(api.eds, "a"), None)])
    assert h.advance(16) == [ResourceDoesNotExist(api.eds, "b")]
    assert h.p.next_deadline() is None


def test_rule_18_timers_stop_on_disconnect_and_restart_for_uncached(
    kind: str, api: Api, mode: str
) -> None:
    h = harness(kind, api, mode, does_not_exist_timeout=10.0)
    h.p.subscribe(api.eds, ["a", "b"])
    h.start()
    respond(h, api.eds, "n1", [("a", "1", make(api.eds, "a"), None)])
    h.flush()
    h.now = 5.0
    h.p.disconnected(h.now)
    assert h.p.next_deadline() is None
    assert h.advance(100) == []  # no timer runs without a stream
    h.connect()
    assert h.p.next_deadline() == h.now + 10.0
    assert h.advance(10) == [ResourceDoesNotExist(api.eds, "b")]


def test_rule_18_disabled_and_not_for_wildcard(kind: str, api: Api, mode: str) -> None:
    h = harness(kind, api, mode, does_not_exist_timeout=None)
    h.p.subscribe(api.eds, ["a"])
    h.start()
    assert h.p.next_deadline() is None
    w = harness(kind, api, mode)
    w.p.subscribe(api.cds, None)
    w.start()
    assert w.p.next_deadline() is None
    assert w.advance(60) == []


def test_rule_18_one_timer_per_name_per_stream(kind: str, api: Api, mode: str) -> None:
    h = harness(kind, api, mode, does_not_exist_timeout=5.0)
    h.p.subscribe(api.eds, ["a"])
    h.start()
    respond(h, api.eds, "n1", [("a", "1", make(api.eds, "a"), 2.0)])
    h.flush()
    assert h.advance(3) == [ResourceRemoved(api.eds, "a", "ttl_expired")]
    # Later requests repeat the name (a SotW ACK does), but it was already
    # requested on this stream: no second timer, no "does not exist" on top.
    respond(h, api.eds, "n2", [])
    h.flush()
    assert h.p.next_deadline() is None
    assert h.advance(60) == []
    # A new subscription of the name is a new request, with its own timer.
    h.p.unsubscribe(api.eds, ["a"])
    h.flush()
    h.p.subscribe(api.eds, ["a"])
    h.flush()
    assert h.advance(5) == [ResourceDoesNotExist(api.eds, "a")]
