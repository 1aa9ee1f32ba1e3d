"""The sans-I/O poll scheduler and the thin sync/async polling streams (no sockets)."""

from __future__ import annotations

import random

import pytest
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DiscoveryRequest,
    DiscoveryResponse,
)
from google.rpc.status_pb2 import Status
from tenacity import wait_fixed

from xds_client.errors import UsageError
from xds_client.node import Node
from xds_client.resources import CLUSTER, ENDPOINT, LISTENER
from xds_client.transport._polling import PollError, PollPolicy, PollScheduler

NODE = Node("n1", cluster="c1").to_proto()


def policy(**kw: object) -> PollPolicy:
    base = PollPolicy(interval=10.0, jitter=0.0, backoff=wait_fixed(2.0), failures_before_error=3)
    from dataclasses import replace

    return replace(base, **kw)  # type: ignore[arg-type]


def req(
    type_url: str = CLUSTER,
    names: tuple[str, ...] = (),
    version: str = "",
    *,
    node: bool = False,
    nack: bool = False,
) -> DiscoveryRequest:
    r = DiscoveryRequest(type_url=type_url, resource_names=list(names), version_info=version)
    if node:
        r.node.CopyFrom(NODE)
    if nack:
        r.error_detail.CopyFrom(Status(code=3, message="bad"))
    return r


def resp(version: str, type_url: str = CLUSTER) -> DiscoveryResponse:
    return DiscoveryResponse(version_info=version, type_url=type_url)


def test_first_request_is_due_at_once_and_carries_node() -> None:
    s = PollScheduler(policy())
    s.submit(req(node=True), now=100.0)
    s.submit(req(LISTENER), now=100.0)
    assert s.next_due() == 100.0
    first = s.take_due(100.0)
    second = s.take_due(100.0)
    assert first is not None
    assert second is not None
    assert {first.type_url, second.type_url} == {CLUSTER, LISTENER}
    # The node is copied into every poll, even when the core sent it only once.
    assert first.request.node.cluster == "c1"
    assert second.request.node.cluster == "c1"
    assert s.take_due(100.0) is None  # both in flight
    assert s.next_due() is None


def test_success_schedules_next_poll_after_interval_and_suppresses_unchanged() -> None:
    s = PollScheduler(policy())
    s.submit(req(), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    out = s.completed(call, resp("v1"), 0.5)
    assert out is not None
    assert out.version_info == "v1"
    assert s.next_due() == 10.5
    assert s.take_due(10.0) is None
    call = s.take_due(10.5)
    assert call is not None
    assert s.completed(call, resp("v1"), 10.6) is None  # same version, same names
    call = s.take_due(20.6)
    assert call is not None
    assert s.completed(call, None, 20.6) is None  # 304
    call = s.take_due(30.6)
    assert call is not None
    changed = s.completed(call, resp("v2"), 30.6)
    assert changed is not None
    assert changed.version_info == "v2"


def test_jitter_spreads_the_interval() -> None:
    s = PollScheduler(policy(jitter=0.5), rng=random.Random(7))
    dues = []
    for i in range(20):
        s.submit(req(CLUSTER + str(i)), 0.0)
        call = s.take_due(0.0)
        assert call is not None
        s.completed(call, None, 0.0)
    dues = [s._types[CLUSTER + str(i)].due for i in range(20)]
    assert all(5.0 <= d <= 15.0 for d in dues)
    assert len(set(dues)) == 20


def test_ack_keeps_schedule_and_next_poll_carries_version_and_error_detail() -> None:
    s = PollScheduler(policy())
    s.submit(req(names=("a",)), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    s.completed(call, resp("v1"), 0.0)
    s.submit(req(names=("a",), version="v1"), 0.1)  # the ACK
    assert s.next_due() == 10.0
    s.submit(req(names=("a",), version="v0", nack=True), 0.2)  # a NACK keeps the old version
    call = s.take_due(10.0)
    assert call is not None
    assert call.request.version_info == "v0"
    assert call.request.error_detail.code == 3
    assert list(call.request.resource_names) == ["a"]


def test_added_names_poll_at_once_without_version_and_deliver_same_version() -> None:
    s = PollScheduler(policy())
    s.submit(req(ENDPOINT, ("a",)), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    s.completed(call, resp("v1", ENDPOINT), 0.0)
    s.submit(req(ENDPOINT, ("a",), "v1"), 0.0)
    s.submit(req(ENDPOINT, ("b", "a"), "v1"), 1.0)
    call = s.take_due(1.0)
    assert call is not None
    assert call.full
    assert call.request.version_info == ""  # servers answer 304 to a current version
    assert list(call.request.resource_names) == ["a", "b"]
    out = s.completed(call, resp("v1", ENDPOINT), 1.0)
    assert out is not None  # same version, new names: delivered
    call = s.take_due(11.0)
    assert call is not None
    assert call.request.version_info == "v1"
    assert not call.full


def test_removed_names_poll_at_once_keeping_version() -> None:
    s = PollScheduler(policy())
    s.submit(req(ENDPOINT, ("a", "b"), "v1"), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    s.completed(call, None, 0.0)
    s.submit(req(ENDPOINT, ("a",), "v1"), 1.0)
    call = s.take_due(1.0)
    assert call is not None
    assert call.request.version_info == "v1"


def test_subscription_change_during_poll_repolls_when_it_completes() -> None:
    s = PollScheduler(policy())
    s.submit(req(ENDPOINT, ("a",)), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    s.submit(req(ENDPOINT, ("a", "b")), 0.5)
    assert s.take_due(0.5) is None  # one poll per type at a time
    s.completed(call, resp("v1", ENDPOINT), 1.0)
    again = s.take_due(1.0)
    assert again is not None
    assert list(again.request.resource_names) == ["a", "b"]


def test_wildcard_and_unsubscribe() -> None:
    s = PollScheduler(policy())
    s.submit(req(LISTENER, ("*", "x")), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    assert list(call.request.resource_names) == []  # the legacy wildcard covers "x"
    s.completed(call, None, 0.0)
    s.submit(req(ENDPOINT, ("a",)), 0.0)
    s.submit(req(ENDPOINT, ()), 1.0)  # no names after named ones: unsubscribe
    assert s.next_due() == 10.0
    assert s.take_due(100.0) is not None  # the listener
    assert s.take_due(100.0) is None  # not the endpoints
    s.submit(req(ENDPOINT, (), "v1"), 101.0)  # stays unsubscribed
    assert s.next_due() is None
    # Subscribing again asks for everything: the client may have dropped its copy.
    s.submit(req(ENDPOINT, ("a",), "v1"), 102.0)
    call = s.take_due(102.0)
    assert call is not None
    assert call.full
    assert call.request.version_info == ""


def test_failures_back_off_through_tenacity_then_fail_the_stream() -> None:
    s = PollScheduler(policy())
    s.submit(req(), 0.0)
    err = PollError("boom", retryable=True)
    call = s.take_due(0.0)
    assert call is not None
    s.completed(call, None, 0.0)  # the stream worked once
    now = 10.0
    for _ in range(2):
        call = s.take_due(now)
        assert call is not None
        assert s.failed(call, err, now) is False
        assert s.next_due() == now + 2.0  # wait_fixed(2)
        now += 2.0
    call = s.take_due(now)
    assert call is not None
    assert s.failed(call, err, now) is True  # third in a row
    # A success resets the count.
    call = s.take_due(now + 2.0)
    assert call is not None
    s.completed(call, None, now + 2.0)
    call = s.take_due(now + 12.0)
    assert call is not None
    assert s.failed(call, err, now + 12.0) is False


def test_failure_before_any_success_fails_at_once() -> None:
    s = PollScheduler(policy())
    s.submit(req(), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    assert s.failed(call, PollError("refused", retryable=True), 0.0) is True
    assert s.next_due() == 2.0  # still backed off, should the stream be polled again


def test_non_retryable_failure_fails_at_once() -> None:
    s = PollScheduler(policy())
    s.submit(req(), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    assert s.failed(call, PollError("401", retryable=False), 0.0) is True


def test_default_backoff_grows_and_is_capped() -> None:
    p = PollPolicy()
    assert all(0 <= p.backoff_delay(n) <= 30.0 for n in range(1, 30))
    assert max(p.backoff_delay(1) for _ in range(50)) <= 1.0


def test_delta_and_bad_policies_are_usage_errors() -> None:
    s = PollScheduler(policy())
    with pytest.raises(UsageError, match="SotW only"):
        s.submit(DeltaDiscoveryRequest(type_url=CLUSTER), 0.0)
    with pytest.raises(UsageError):
        PollPolicy(interval=0)
    with pytest.raises(UsageError):
        PollPolicy(jitter=1.0)
    with pytest.raises(UsageError):
        PollPolicy(request_timeout=0)
    assert PollPolicy().with_interval(2).interval == 2
    assert PollPolicy().with_request_timeout(3).request_timeout == 3
    assert PollPolicy().with_backoff(wait_fixed(1), 5).failures_before_error == 5


# -- the streams, with scripted posters ------------------------------------------------


def test_new_stream_asks_in_full_then_with_the_accepted_version() -> None:
    # A new stream of a client that already holds v1 (after a reconnect): the
    # first poll gets a complete answer, so the driver sees the server work.
    s = PollScheduler(policy())
    s.submit(req(version="v1"), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    assert call.full
    assert call.request.version_info == ""
    assert s.completed(call, resp("v1"), 0.0) is not None
    s.submit(req(version="v1"), 0.0)  # the ACK
    call = s.take_due(10.0)
    assert call is not None
    assert not call.full
    assert call.request.version_info == "v1"
    assert s.completed(call, resp("v1"), 10.0) is None  # a server without 304s


def test_answer_at_the_requested_version_is_not_new() -> None:
    s = PollScheduler(policy())
    s.submit(req(), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    s.completed(call, resp("v1"), 0.0)
    s.submit(req(version="v2"), 0.0)  # e.g. the server moved on and back, as seen by the core
    call = s.take_due(10.0)
    assert call is not None
    assert s.completed(call, resp("v2"), 10.0) is None


def test_explicit_wildcard_then_no_names_unsubscribes() -> None:
    s = PollScheduler(policy())
    s.submit(req(LISTENER, ("*", "a")), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    s.completed(call, resp("v1", LISTENER), 0.0)
    s.submit(req(LISTENER, (), "v1"), 1.0)
    assert s.next_due() is None


def test_resubscribed_names_are_delivered_again() -> None:
    # The core may drop a resource when it is unsubscribed; asking again must bring it back.
    s = PollScheduler(policy())
    s.submit(req(ENDPOINT, ("a", "b")), 0.0)
    call = s.take_due(0.0)
    assert call is not None
    assert s.completed(call, resp("v1", ENDPOINT), 0.0) is not None
    s.submit(req(ENDPOINT, ("a",), "v1"), 1.0)  # drop b ...
    s.submit(req(ENDPOINT, ("a", "b"), "v1"), 1.0)  # ... and want it back before any poll
    call = s.take_due(1.0)
    assert call is not None
    assert call.full
    assert s.completed(call, resp("v1", ENDPOINT), 1.0) is not None
