"""Hypothesis walks the poll scheduler through random submits, polls and answers."""

from __future__ import annotations

import random

from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
from google.rpc.status_pb2 import Status
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from tenacity import wait_fixed

from xds_client.node import Node
from xds_client.resources import CLUSTER, ENDPOINT, LISTENER
from xds_client.transport._polling import PollCall, PollError, PollPolicy, PollScheduler

TYPES = st.sampled_from([CLUSTER, ENDPOINT, LISTENER])
NAMES = st.lists(st.sampled_from(["a", "b", "c", "*"]), max_size=3, unique=True)
VERSIONS = st.sampled_from(["", "1", "2", "3"])
NODE = Node("n", cluster="c").to_proto()


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.policy = PollPolicy(
            interval=10.0, jitter=0.2, backoff=wait_fixed(1.0), failures_before_error=2
        )
        self.s = PollScheduler(self.policy, rng=random.Random(0))  # replayable jitter
        self.now = 0.0
        self.in_flight: dict[str, PollCall] = {}
        self.delivered: dict[str, tuple[str, frozenset[str]]] = {}
        self.node_seen = False

    @rule(type_url=TYPES, names=NAMES, version=VERSIONS, node=st.booleans(), nack=st.booleans())
    def submit(self, type_url: str, names: list[str], version: str, node: bool, nack: bool) -> None:
        request = DiscoveryRequest(type_url=type_url, resource_names=names, version_info=version)
        if node:
            request.node.CopyFrom(NODE)
            self.node_seen = True
        if nack:
            request.error_detail.CopyFrom(Status(code=3, message="x"))
        self.s.submit(request, self.now)

    @rule(seconds=st.floats(0, 15))
    def advance(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def take(self) -> None:
        call = self.s.take_due(self.now)
        if call is None:
            return
        assert call.type_url not in self.in_flight  # one poll per type at a time
        names = list(call.request.resource_names)
        assert names == sorted(names)
        assert "*" not in names
        assert frozenset(names) == call.names
        if self.node_seen:
            assert call.request.node.cluster == "c"  # the node goes in every poll
        if call.full:
            assert call.request.version_info == ""
        self.in_flight[call.type_url] = call

    @precondition(lambda self: bool(self.in_flight))
    @rule(data=st.data(), version=st.one_of(st.none(), VERSIONS))
    def answer(self, data: st.DataObject, version: str | None) -> None:
        type_url = data.draw(st.sampled_from(sorted(self.in_flight)))
        call = self.in_flight.pop(type_url)
        response = None if version is None else DiscoveryResponse(version_info=version)
        out = self.s.completed(call, response, self.now)
        if out is not None:
            key = (out.version_info, call.names)
            # Never the same thing twice in a row, unless names were added.
            assert call.full or self.delivered.get(type_url) != key
            assert not (out.version_info and out.version_info == call.request.version_info)
            assert out.type_url == type_url
            self.delivered[type_url] = key

    @precondition(lambda self: bool(self.in_flight))
    @rule(data=st.data(), retryable=st.booleans())
    def fail(self, data: st.DataObject, retryable: bool) -> None:
        type_url = data.draw(st.sampled_from(sorted(self.in_flight)))
        call = self.in_flight.pop(type_url)
        fatal = self.s.failed(call, PollError("x", retryable=retryable), self.now)
        if not retryable:
            assert fatal or not self.s._types[type_url].active

    @invariant()
    def due_times_are_sane(self) -> None:
        due = self.s.next_due()
        idle_active = [
            t for t, st_ in self.s._types.items() if st_.active and t not in self.in_flight
        ]
        assert (due is None) == (not idle_active)
        if due is not None:
            # Nothing is scheduled further away than one jittered interval (or one backoff).
            assert due <= self.now + max(self.policy.interval * 1.2, 1.0) + 1e-9


TestScheduler = SchedulerMachine.TestCase
# Small steps, few runs: the whole state space is three types and four names.
TestScheduler.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
