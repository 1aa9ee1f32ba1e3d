"""SotW rules 1-9 and 19 of the protocol core issue, one test (at least) per rule.

Each test runs for v3 and v2 type URLs, on an ADS stream that also carries
another type and on a single-type stream.
"""

from __future__ import annotations

import pytest
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import Message

from xds_client.protocol import (
    RESPONSE_KEY,
    ResourceDeletionIgnored,
    ResourceRemoved,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
)

from ._protocol_support import (
    NODE,
    Api,
    bad_any,
    make,
    names,
    of,
    pack,
    sotw,
    sotw_response,
    wrap,
)


def test_rule_01_node_only_in_first_request_of_each_stream(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.cds, ["c1"])
    h.p.subscribe(api.eds, ["c1"])
    if mode == "single":
        first, second = h.start()
        assert first.node == NODE
        assert not second.HasField("node")
    else:
        assert [r.HasField("node") for r in h.start()] == [False, False]
    h.receive(sotw_response(api.cds, "1", "n1", [make(api.cds, "c1")]))
    (ack,) = h.flush()
    assert not ack.HasField("node")
    h.p.disconnected(h.now)
    again = h.connect()
    assert again[0].node == NODE
    assert not any(r.HasField("node") for r in again[1:])


def test_rule_01_node_in_every_request_option(api: Api, mode: str) -> None:
    h = sotw(api, mode, node_in_every_request=True)
    h.p.subscribe(api.cds, ["c1"])
    h.p.subscribe(api.eds, ["c1"])
    reqs = h.start()
    h.receive(sotw_response(api.cds, "1", "n1", [make(api.cds, "c1")]))
    reqs += h.flush()
    assert len(reqs) == 3
    assert all(r.node == NODE for r in reqs)


def test_rule_02_ack_copies_version_and_nonce_with_full_names(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.eds, ["a", "b"])
    h.start()
    events = h.receive(sotw_response(api.eds, "v7", "nonce-7", [make(api.eds, "a")]))
    assert events[-1] == ResponseAccepted(api.eds, "v7", "nonce-7", valid_resources=1)
    (ack,) = h.flush()  # nothing for the other type of the ADS stream
    assert ack.type_url == api.eds
    assert ack.version_info == "v7"
    assert ack.response_nonce == "nonce-7"
    assert list(ack.resource_names) == ["a", "b"]
    assert not ack.HasField("error_detail")
    assert h.flush() == []


def test_rule_02_one_reply_per_response_before_other_requests(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.eds, ["a"])
    h.start()
    h.receive(sotw_response(api.eds, "1", "n1", [make(api.eds, "a", "x")]))
    h.receive(sotw_response(api.eds, "2", "n2", [make(api.eds, "a", "y")]))
    h.p.subscribe(api.eds, ["b"])  # coalesced into the replies, no third request
    reqs = of(api.eds, h.flush())
    assert [(r.version_info, r.response_nonce) for r in reqs] == [("1", "n1"), ("2", "n2")]
    assert all(list(r.resource_names) == ["a", "b"] for r in reqs)


def test_rule_03_nack_keeps_last_good_version_and_cache(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.cds, ["c1", "c2"])
    h.start()
    first = make(api.cds, "c1", "good")
    h.receive(sotw_response(api.cds, "1", "n1", [first, make(api.cds, "c2")]))
    h.flush()
    events = h.receive(
        sotw_response(
            api.cds, "2", "n2", [make(api.cds, "c1", "new"), wrap("c2", bad_any(api.cds))]
        )
    )
    (nack,) = h.flush()
    assert nack.version_info == "1"
    assert nack.response_nonce == "n2"
    assert nack.error_detail.code == 3
    assert "c2" in nack.error_detail.message
    assert list(nack.resource_names) == ["c1", "c2"]
    rejected = events[-1]
    assert isinstance(rejected, ResponseRejected)
    assert rejected.version == "2"
    assert list(rejected.errors) == ["c2"]
    # gRFC A46: the valid c1 is applied; the bad c2 keeps its last good value.
    assert names(events, ResourceUpdated) == ["c1"]
    assert h.p.resources(api.cds)["c2"].resource == make(api.cds, "c2")
    assert h.p.version_info(api.cds) == "1"
    state = {s.name: s for s in h.p.resource_states(api.cds)}
    assert state["c2"].status == "NACKED"
    assert state["c2"].failed_version == "2"
    assert state["c1"].status == "ACKED"


def test_rule_03_first_nack_has_empty_version_and_custom_code(api: Api, mode: str) -> None:
    h = sotw(api, mode, nack_code=13)
    h.p.subscribe(api.eds, ["a"])
    h.start()
    h.receive(sotw_response(api.eds, "1", "n1", [wrap("a", bad_any(api.eds))]))
    (nack,) = h.flush()
    assert nack.version_info == ""
    assert nack.error_detail.code == 13
    assert h.p.resources(api.eds) == {}


def test_rule_03_reject_whole_response_applies_nothing(api: Api, mode: str) -> None:
    h = sotw(api, mode, reject_whole_response=True)
    h.p.subscribe(api.eds, ["a", "b"])
    h.start()
    events = h.receive(
        sotw_response(api.eds, "1", "n1", [make(api.eds, "a"), wrap("b", bad_any(api.eds))])
    )
    assert [type(e) for e in events] == [ResponseRejected]
    assert h.p.resources(api.eds) == {}


def test_rule_04_reconnect_rerequests_with_last_version_and_no_nonce(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.cds, ["c1"])
    h.p.subscribe(api.eds, ["c1"])
    h.start()
    h.receive(sotw_response(api.cds, "3", "n3", [make(api.cds, "c1")]))
    h.flush()
    h.receive(sotw_response(api.cds, "4", "n4", [make(api.cds, "c1", "x")]))  # ACK owed
    h.p.disconnected(h.now)
    reqs = h.connect()
    by_type = {r.type_url: r for r in reqs}
    expected = {api.cds, api.eds} | ({api.sds} if mode == "ads" else set())
    assert set(by_type) == expected
    assert len(reqs) == len(expected)
    assert by_type[api.cds].version_info == "4"
    assert by_type[api.eds].version_info == ""
    assert all(r.response_nonce == "" for r in reqs)
    assert list(by_type[api.cds].resource_names) == ["c1"]
    if mode == "ads":
        assert by_type[api.sds].version_info == "o1"


def test_rule_05_wildcard_empty_list_only_before_names(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.cds, None)
    (first,) = of(api.cds, h.start())
    assert list(first.resource_names) == []
    h.p.subscribe(api.cds, ["c1"])
    (second,) = h.flush()
    assert list(second.resource_names) == ["*", "c1"]
    h.p.unsubscribe(api.cds, ["c1"])
    (third,) = h.flush()
    assert list(third.resource_names) == ["*"]  # [] would no longer mean wildcard
    h.p.unsubscribe(api.cds, None)
    (fourth,) = h.flush()
    assert list(fourth.resource_names) == []
    assert h.p.subscribed_types() == ([api.sds] if mode == "ads" else [])
    # ... and that empty list is not a wildcard: what the server sends is ignored.
    assert h.receive(sotw_response(api.cds, "1", "n1", [make(api.cds, "c9")])) == []
    assert h.flush() == []
    # A new stream starts over: the legacy empty list is wildcard again.
    h.p.subscribe(api.cds, None)
    h.p.disconnected(h.now)
    (fresh,) = of(api.cds, h.connect())
    assert list(fresh.resource_names) == []


def test_rule_05_wildcard_accepts_every_resource(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.lds, ["*"])
    h.start()
    events = h.receive(
        sotw_response(api.lds, "1", "n1", [make(api.lds, "l1"), make(api.lds, "l2")])
    )
    assert names(events, ResourceUpdated) == ["l1", "l2"]


def test_rule_06_unrequested_resources_and_types_are_ignored(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.eds, ["a"])
    h.start()
    events = h.receive(sotw_response(api.eds, "1", "n1", [make(api.eds, "a"), make(api.eds, "z")]))
    assert names(events, ResourceUpdated) == ["a"]
    assert set(h.p.resources(api.eds)) == {"a"}
    h.flush()
    # A type nobody subscribed: no events, no ACK or NACK.
    assert h.receive(sotw_response(api.rds, "1", "r1", [make(api.rds, "r")])) == []
    assert h.flush() == []


def test_rule_06_unsubscribed_type_keeps_nonce_for_next_request(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.eds, ["a"])
    h.start()
    h.p.unsubscribe(api.eds, ["a"])
    h.flush()
    assert h.receive(sotw_response(api.eds, "1", "late", [make(api.eds, "a")])) == []
    assert h.flush() == []
    h.p.subscribe(api.eds, ["b"])
    (req,) = h.flush()
    assert req.response_nonce == "late"
    assert req.version_info == ""


def test_rule_07_full_state_absence_deletes_only_received(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.cds, ["c1", "c2", "c3"])
    h.start()
    h.receive(sotw_response(api.cds, "1", "n1", [make(api.cds, "c1"), make(api.cds, "c2")]))
    events = h.receive(sotw_response(api.cds, "2", "n2", [make(api.cds, "c1")]))
    assert [e for e in events if isinstance(e, ResourceRemoved)] == [
        ResourceRemoved(api.cds, "c2", "deleted")
    ]
    assert set(h.p.resources(api.cds)) == {"c1"}
    state = {s.name: s.status for s in h.p.resource_states(api.cds)}
    assert state == {"c1": "ACKED", "c2": "DOES_NOT_EXIST", "c3": "REQUESTED"}


def test_rule_07_listeners_deleted_by_absence_too(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.lds, None)
    h.start()
    h.receive(sotw_response(api.lds, "1", "n1", [make(api.lds, "l1")]))
    events = h.receive(sotw_response(api.lds, "2", "n2", []))
    assert names(events, ResourceRemoved) == ["l1"]


def test_rule_07_absence_deletes_nothing_for_rds_and_eds(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.eds, ["a", "b"])
    h.p.subscribe(api.rds, ["r"])
    h.start()
    h.receive(sotw_response(api.eds, "1", "n1", [make(api.eds, "a"), make(api.eds, "b")]))
    h.receive(sotw_response(api.rds, "1", "r1", [make(api.rds, "r")]))
    events = h.receive(sotw_response(api.eds, "2", "n2", [make(api.eds, "a", "new")]))
    events += h.receive(sotw_response(api.rds, "2", "r2", []))
    assert names(events, ResourceRemoved) == []
    assert set(h.p.resources(api.eds)) == {"a", "b"}
    assert set(h.p.resources(api.rds)) == {"r"}


def test_rule_07_ignore_resource_deletion_keeps_and_reports(api: Api, mode: str) -> None:
    h = sotw(api, mode, ignore_resource_deletion=True)
    h.p.subscribe(api.cds, None)
    h.start()
    h.receive(sotw_response(api.cds, "1", "n1", [make(api.cds, "c1"), make(api.cds, "c2")]))
    events = h.receive(sotw_response(api.cds, "2", "n2", [make(api.cds, "c1")]))
    assert [e for e in events if isinstance(e, ResourceDeletionIgnored)] == [
        ResourceDeletionIgnored(api.cds, "c2")
    ]
    assert names(events, ResourceRemoved) == []
    assert set(h.p.resources(api.cds)) == {"c1", "c2"}
    again = h.receive(sotw_response(api.cds, "3", "n3", [make(api.cds, "c1")]))
    assert names(again, ResourceDeletionIgnored) == []  # reported once
    back = h.receive(sotw_response(api.cds, "4", "n4", [make(api.cds, "c1"), make(api.cds, "c2")]))
    assert names(back, ResourceUpdated) == []  # same bytes as kept
    h.receive(sotw_response(api.cds, "5", "n5", []))
    assert set(h.p.resources(api.cds)) == {"c1", "c2"}


@pytest.mark.parametrize("problem", ["duplicate", "type_mismatch", "wrapped_mismatch"])
def test_rule_08_whole_response_nack(api: Api, mode: str, problem: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.cds, ["c1", "c2"])
    h.start()
    good = make(api.cds, "c1")
    bad: Message | AnyProto
    if problem == "duplicate":
        bad = make(api.cds, "c1", "other")
    elif problem == "type_mismatch":
        bad = pack(make(api.eds, "c2"))
    else:
        bad = wrap("c2", make(api.eds, "c2"))
    events = h.receive(sotw_response(api.cds, "1", "n1", [good, bad]))
    assert len(events) == 1
    rejected = events[0]
    assert isinstance(rejected, ResponseRejected)
    assert list(rejected.errors) == [RESPONSE_KEY]
    (nack,) = h.flush()
    assert nack.HasField("error_detail")
    assert nack.response_nonce == "n1"
    assert h.p.resources(api.cds) == {}  # the valid c1 is not applied either


def test_rule_09_wrapped_resources_named_by_wrapper_with_ttl(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.eds, ["alias-name"])
    h.start()
    body = make(api.eds, "body-name")
    events = h.receive(
        sotw_response(api.eds, "1", "n1", [wrap("alias-name", body, version="r1", ttl=30)])
    )
    assert events[0] == ResourceUpdated(api.eds, "alias-name", "1", body)
    cached = h.p.resources(api.eds)["alias-name"]
    assert cached.ttl == 30
    assert cached.ttl_deadline == h.now + 30
    assert cached.resource_version == "r1"
    assert h.p.next_deadline() == h.now + 30


def test_rule_19_cache_survives_disconnect_and_nack(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.cds, ["c1"])
    h.start()
    h.receive(sotw_response(api.cds, "1", "n1", [make(api.cds, "c1")]))
    h.p.disconnected(h.now)
    assert set(h.p.resources(api.cds)) == {"c1"}
    h.connect()
    # The same resource on the new stream: no event, just an ACK.
    events = h.receive(sotw_response(api.cds, "1", "m1", [make(api.cds, "c1")]))
    assert [type(e) for e in events] == [ResponseAccepted]
    h.receive(sotw_response(api.cds, "2", "m2", [wrap("c1", bad_any(api.cds))]))
    assert h.p.resources(api.cds)["c1"].resource == make(api.cds, "c1")
