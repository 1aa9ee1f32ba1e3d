"""Delta rules 10-16 of the protocol core issue, one test (at least) per rule.

Each test runs for v3 and v2 type URLs, on an ADS stream that also carries
another type and on a single-type stream.
"""

from __future__ import annotations

import pytest
from envoy.service.discovery.v3.discovery_pb2 import Resource

from xds_client import resources
from xds_client.protocol import (
    RESPONSE_KEY,
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
)

from ._protocol_support import (
    NODE,
    Api,
    bad_any,
    delta,
    delta_resource,
    delta_response,
    make,
    names,
    of,
)


def res(type_url: str, name: str, version: str, tag: str = "") -> Resource:
    return delta_resource(name, make(type_url, name, tag), version=version)


def test_rule_10_first_request_subscribes_everything(api: Api, mode: str) -> None:
    h = delta(api, mode)
    h.p.subscribe(api.cds, ["c1", "c2"])
    h.p.subscribe(api.cds, None)
    h.p.subscribe(api.eds, ["e1"])
    reqs = h.start()
    cds, eds = of(api.cds, reqs)[0], of(api.eds, reqs)[0]
    assert list(cds.resource_names_subscribe) == ["*", "c1", "c2"]
    assert list(cds.resource_names_unsubscribe) == []
    assert list(eds.resource_names_subscribe) == ["e1"]
    assert cds.response_nonce == ""
    assert eds.response_nonce == ""
    # Never on the client's first stream.
    assert not any(r.initial_resource_versions for r in reqs)
    assert (reqs[0].node == NODE) == (mode == "single")


def test_rule_10_initial_resource_versions_after_reconnect(api: Api, mode: str) -> None:
    h = delta(api, mode)
    h.p.subscribe(api.cds, ["c1", "c2", "waiting", "gone"])
    h.p.subscribe(api.cds, None)
    h.start()
    h.receive(
        delta_response(
            api.cds,
            "n1",
            [
                delta_resource("c1", make(api.cds, "c1"), version="1"),
                delta_resource("c2", make(api.cds, "c2"), version="2"),
                delta_resource("gone", make(api.cds, "gone"), version="3"),
                delta_resource("wild", make(api.cds, "wild"), version="4"),
            ],
        )
    )
    h.receive(delta_response(api.cds, "n2", removed=["gone"]))
    h.flush()
    h.p.disconnected(h.now)
    reqs = h.connect()
    (cds,) = of(api.cds, reqs)
    assert dict(cds.initial_resource_versions) == {"c1": "1", "c2": "2", "wild": "4"}
    assert list(cds.resource_names_subscribe) == ["*", "c1", "c2", "waiting", "gone"]
    assert list(cds.resource_names_unsubscribe) == []
    assert cds.response_nonce == ""
    if mode == "ads":
        (other,) = of(api.sds, reqs)
        assert dict(other.initial_resource_versions) == {"other": "o1"}
    assert reqs[0].node == NODE


def test_rule_11_diffs_are_coalesced_between_sends(api: Api, mode: str) -> None:
    h = delta(api, mode)
    h.p.subscribe(api.eds, ["a", "b"])
    h.start()
    h.p.subscribe(api.eds, ["c", "d"])
    h.p.unsubscribe(api.eds, ["b", "d"])  # d never reached the server: not mentioned
    h.p.subscribe(api.eds, ["e"])
    (req,) = h.flush()
    assert list(req.resource_names_subscribe) == ["c", "e"]
    assert list(req.resource_names_unsubscribe) == ["b"]
    assert req.response_nonce == ""
    assert h.flush() == []


def test_rule_11_remove_then_add_resubscribes(api: Api, mode: str) -> None:
    h = delta(api, mode)
    h.p.subscribe(api.eds, ["a"])
    h.start()
    h.receive(delta_response(api.eds, "n1", [res(api.eds, "a", "1")]))
    h.flush()
    h.p.unsubscribe(api.eds, ["a"])
    h.p.subscribe(api.eds, ["a"])
    (req,) = h.flush()
    assert list(req.resource_names_subscribe) == ["a"]
    assert list(req.resource_names_unsubscribe) == []
    # The caller forgot its copy on unsubscribe, so the resend is reported again.
    events = h.receive(delta_response(api.eds, "n2", [res(api.eds, "a", "1")]))
    assert names(events, ResourceUpdated) == ["a"]


def test_rule_11_remove_then_add_while_cached_by_wildcard(api: Api, mode: str) -> None:
    h = delta(api, mode)
    h.p.subscribe(api.cds, ["*", "c1"])
    h.start()
    h.receive(delta_response(api.cds, "n1", [res(api.cds, "c1", "1")]))
    h.flush()
    h.p.unsubscribe(api.cds, ["c1"])
    assert "c1" in h.p.resources(api.cds)  # still covered by the wildcard
    h.p.subscribe(api.cds, ["c1"])
    (req,) = h.flush()
    assert list(req.resource_names_subscribe) == ["c1"]
    assert list(req.resource_names_unsubscribe) == []


def test_rule_12_ack_nack_and_spontaneous_framing(api: Api, mode: str) -> None:
    h = delta(api, mode)
    h.p.subscribe(api.cds, ["c1", "c2"])
    h.start()
    events = h.receive(
        delta_response(
            api.cds, "n1", [res(api.cds, "c1", "1"), res(api.cds, "c2", "1")], system_version="s1"
        )
    )
    assert events[-1] == ResponseAccepted(api.cds, "s1", "n1", valid_resources=2)
    h.p.subscribe(api.cds, ["c3"])
    ack, diff = h.flush()
    assert ack.response_nonce == "n1"
    assert not ack.HasField("error_detail")
    assert list(ack.resource_names_subscribe) == []
    assert not ack.initial_resource_versions
    assert diff.response_nonce == ""
    assert list(diff.resource_names_subscribe) == ["c3"]
    bad = delta_resource("c2", bad_any(api.cds), version="2")
    events = h.receive(delta_response(api.cds, "n2", [res(api.cds, "c1", "2", "new"), bad]))
    (nack,) = h.flush()
    assert nack.response_nonce == "n2"
    assert nack.error_detail.code == 3
    assert "c2" in nack.error_detail.message
    assert isinstance(events[-1], ResponseRejected)
    # The rejected c2 keeps its tracked version; the valid c1 moved on (gRFC A46).
    h.p.disconnected(h.now)
    (first,) = of(api.cds, h.connect())
    assert dict(first.initial_resource_versions) == {"c1": "2", "c2": "1"}


def test_rule_12_whole_rejection_keeps_every_version(api: Api, mode: str) -> None:
    h = delta(api, mode, reject_whole_response=True)
    h.p.subscribe(api.cds, ["c1", "c2"])
    h.start()
    h.receive(delta_response(api.cds, "n1", [res(api.cds, "c1", "1"), res(api.cds, "c2", "1")]))
    events = h.receive(
        delta_response(
            api.cds,
            "n2",
            [res(api.cds, "c1", "2", "new"), delta_resource("c2", bad_any(api.cds), version="2")],
        )
    )
    assert [type(e) for e in events] == [ResponseRejected]
    h.p.disconnected(h.now)
    (first,) = of(api.cds, h.connect())
    assert dict(first.initial_resource_versions) == {"c1": "1", "c2": "1"}


def test_rule_13_removed_resources(api: Api, mode: str) -> None:
    h = delta(api, mode)
    h.p.subscribe(api.eds, ["a", "b"])
    h.start()
    h.receive(delta_response(api.eds, "n1", [res(api.eds, "a", "1"), res(api.eds, "b", "1")]))
    h.flush()
    events = h.receive(delta_response(api.eds, "n2", removed=["a", "unknown"]))
    assert [e for e in events if isinstance(e, ResourceRemoved)] == [
        ResourceRemoved(api.eds, "a", "deleted")
    ]
    assert isinstance(events[-1], ResponseAccepted)
    assert set(h.p.resources(api.eds)) == {"b"}
    # Still wanted: stays subscribed, without a version, and is not unsubscribed.
    (ack,) = h.flush()
    assert list(ack.resource_names_unsubscribe) == []
    state = {s.name: s for s in h.p.resource_states(api.eds)}
    assert state["a"].status == "DOES_NOT_EXIST"
    assert state["a"].version == ""
    h.p.disconnected(h.now)
    (first,) = of(api.eds, h.connect())
    assert dict(first.initial_resource_versions) == {"b": "1"}
    assert list(first.resource_names_subscribe) == ["a", "b"]
    back = h.receive(delta_response(api.eds, "n3", [res(api.eds, "a", "5")]))
    assert names(back, ResourceUpdated) == ["a"]


@pytest.mark.parametrize("problem", ["repeated", "updated_and_removed", "type_mismatch"])
def test_rule_14_whole_response_nack(api: Api, mode: str, problem: str) -> None:
    h = delta(api, mode)
    h.p.subscribe(api.eds, ["a", "b"])
    h.start()
    good = res(api.eds, "a", "1")
    removed: list[str] = []
    if problem == "repeated":
        others = [good, res(api.eds, "a", "2", "x")]
    elif problem == "updated_and_removed":
        others = [good]
        removed = ["a"]
    else:
        others = [good, delta_resource("b", make(api.cds, "b"), version="1")]
    events = h.receive(delta_response(api.eds, "n1", others, removed))
    assert len(events) == 1
    assert isinstance(events[0], ResponseRejected)
    assert list(events[0].errors) == [RESPONSE_KEY]
    (nack,) = h.flush()
    assert nack.response_nonce == "n1"
    assert nack.HasField("error_detail")
    assert h.p.resources(api.eds) == {}


def test_rule_15_names_unsubscribed_under_wildcard_stay_ambiguous(api: Api, mode: str) -> None:
    h = delta(api, mode)
    h.p.subscribe(api.cds, ["*", "c1", "c2"])
    h.start()
    h.receive(delta_response(api.cds, "n1", [res(api.cds, "c1", "1"), res(api.cds, "c2", "1")]))
    h.flush()
    h.p.unsubscribe(api.cds, ["c1", "c2"])
    (req,) = h.flush()
    assert list(req.resource_names_unsubscribe) == ["c1", "c2"]
    # Ambiguous: still held (the wildcard may keep them) until the server decides.
    assert set(h.p.resources(api.cds)) == {"c1", "c2"}
    h.p.disconnected(h.now)
    (first,) = of(api.cds, h.connect())
    assert dict(first.initial_resource_versions) == {"c1": "1", "c2": "1"}
    assert list(first.resource_names_subscribe) == ["*"]
    # The server resends c1 (the wildcard keeps it) and removes c2.
    events = h.receive(
        delta_response(api.cds, "n2", [res(api.cds, "c1", "2", "new")], removed=["c2"])
    )
    assert names(events, ResourceUpdated) == ["c1"]
    assert names(events, ResourceRemoved) == ["c2"]
    assert set(h.p.resources(api.cds)) == {"c1"}
    # Dropping the wildcard forgets what only it covered.
    h.p.unsubscribe(api.cds, None)
    assert h.p.resources(api.cds) == {}
    (drop,) = [r for r in h.flush() if not r.response_nonce]
    assert list(drop.resource_names_unsubscribe) == ["*"]


def test_rule_16_aliases_map_to_the_resource(api: Api, mode: str) -> None:
    h = delta(api, mode, does_not_exist_timeout=5.0)
    vhds = resources.VIRTUAL_HOST if api.name == "v3" else resources.V2_VIRTUAL_HOST
    h.p.subscribe(vhds, ["rc/foo.example.com"])
    (req,) = of(vhds, h.start())
    assert list(req.resource_names_subscribe) == ["rc/foo.example.com"]
    vhost = make(vhds, "rc/vh1")
    events = h.receive(
        delta_response(
            vhds,
            "n1",
            [delta_resource("rc/vh1", vhost, version="1", aliases=["rc/foo.example.com"])],
        )
    )
    assert events[0] == ResourceUpdated(vhds, "rc/vh1", "1", vhost, ("rc/foo.example.com",))
    assert h.advance(10) == []  # the alias was satisfied: no does-not-exist
    (state,) = [s for s in h.p.resource_states(vhds) if s.name == "rc/foo.example.com"]
    assert (state.status, state.version) == ("ACKED", "1")
    # An unknown alias comes back as a bodiless resource named by it.
    h.p.subscribe(vhds, ["rc/nope.example.com"])
    h.flush()
    events = h.receive(delta_response(vhds, "n2", [delta_resource("rc/nope.example.com", None)]))
    assert events[0] == ResourceDoesNotExist(vhds, "rc/nope.example.com")
    # A removal names the aliases too, so a watcher of the alias hears of it.
    h.p.subscribe(vhds, ["rc/bar.example.com"])
    h.flush()
    h.receive(
        delta_response(
            vhds,
            "n3",
            [delta_resource("rc/vh2", make(vhds, "rc/vh2"), aliases=["rc/bar.example.com"])],
        )
    )
    events = h.receive(delta_response(vhds, "n4", removed=["rc/vh2"]))
    assert events[0] == ResourceRemoved(vhds, "rc/vh2", "deleted", ("rc/bar.example.com",))
    (gone,) = [s for s in h.p.resource_states(vhds) if s.name == "rc/bar.example.com"]
    assert gone.status == "DOES_NOT_EXIST"
    # Unsubscribing the alias forgets the resource it mapped to.
    h.p.unsubscribe(vhds, ["rc/foo.example.com"])
    assert "rc/vh1" not in h.p.resources(vhds)


def test_rule_13_ignore_resource_deletion_keeps_removed(api: Api, mode: str) -> None:
    h = delta(api, mode, ignore_resource_deletion=True)
    h.p.subscribe(api.cds, ["c1"])
    h.start()
    h.receive(delta_response(api.cds, "n1", [res(api.cds, "c1", "1")]))
    events = h.receive(delta_response(api.cds, "n2", removed=["c1"]))
    assert [e for e in events if isinstance(e, ResourceDeletionIgnored)] == [
        ResourceDeletionIgnored(api.cds, "c1")
    ]
    assert names(events, ResourceRemoved) == []
    assert set(h.p.resources(api.cds)) == {"c1"}
