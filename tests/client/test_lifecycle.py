"""The stream lifecycle table (``client/_lifecycle.py``) and the session that follows it.

Hypothesis walks every phase against every input (what the table lacks is an error),
the reconnection rules over their whole domain, and a session through random driver
inputs with a primary and a fallback: the streams the driver holds are always the
ones the session thinks open, and a candidate runs only beside a fallback.
"""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse
from hypothesis import given, settings
from hypothesis import strategies as st

from xds_client import Backoff
from xds_client.client._lifecycle import (
    TRANSITIONS,
    Input,
    Phase,
    Role,
    Stream,
    StreamStateError,
    after_failure,
    transition,
)
from xds_client.client._options import build_options
from xds_client.client._session import CloseStream, OpenStream, ProbeServer, Session
from xds_client.client._watchers import EventBuffer
from xds_client.resources import CLUSTER, resource_type

POLICY = Backoff(initial=1, multiplier=2, jitter=0, maximum=8)


def _stream(role: Role = Role.PRIMARY) -> Stream:
    return Stream(key="ads", role=role, backoff=POLICY.state())


@given(st.lists(st.sampled_from(list(Input)), max_size=30))
def test_a_stream_moves_only_by_the_table(inputs: list[Input]) -> None:
    stream = _stream()
    for given_input in inputs:
        before = stream.phase
        row = TRANSITIONS.get((before, given_input))
        if row is None:
            with pytest.raises(StreamStateError, match=before.value):
                stream.move(given_input)
            assert stream.phase is before  # a refused input changes nothing
        else:
            assert stream.move(given_input) is row


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("given_input", list(Input))
def test_every_phase_against_every_input(phase: Phase, given_input: Input) -> None:
    if (phase, given_input) in TRANSITIONS:
        assert transition(phase, given_input) in Phase
    else:
        with pytest.raises(StreamStateError):
            transition(phase, given_input)


def test_the_table_has_the_rows_the_session_needs() -> None:
    # Every phase is reachable from BACKOFF, CLOSED only leads to itself, and every
    # open phase can fail (back to BACKOFF) or be closed.
    reachable, frontier = {Phase.BACKOFF}, [Phase.BACKOFF]
    while frontier:
        phase = frontier.pop()
        for (start, _), end in TRANSITIONS.items():
            if start is phase and end not in reachable:
                reachable.add(end)
                frontier.append(end)
    assert reachable == set(Phase)
    assert {end for (start, _), end in TRANSITIONS.items() if start is Phase.CLOSED} == {
        Phase.CLOSED
    }
    for phase in (Phase.OPENING, Phase.LIVE):
        assert TRANSITIONS[phase, Input.FAILURE] is Phase.BACKOFF
        assert TRANSITIONS[phase, Input.CLOSE] is Phase.CLOSED


def test_a_new_attempt_gets_new_lists() -> None:
    stream = _stream()
    stream.opened(1)
    first = stream.in_flight
    first.append(None)
    stream.ended(Input.FAILURE)
    stream.opened(2)
    assert stream.in_flight is not first
    assert stream.in_flight == []
    assert first == [None]


@given(
    role=st.sampled_from([Role.PRIMARY, Role.FALLBACK, Role.CANDIDATE]),
    was=st.sampled_from([Phase.OPENING, Phase.LIVE]),
    servers=st.integers(1, 4),
    server=st.integers(0, 3),
    all_cached=st.booleans(),
    polled=st.booleans(),
    reported=st.sampled_from([None, True, False]),
)
def test_the_reconnection_rules(
    *,
    role: Role, was: Phase, servers: int, server: int, all_cached: bool, polled: bool,
    reported: bool | None,
) -> None:  # fmt: skip
    server = 0 if role is Role.CANDIDATE else min(server, servers - 1)
    stream = Stream(key="k", role=role, backoff=POLICY.state(), server=server)
    plan = after_failure(
        stream, was, servers=servers, all_cached=all_cached, polled=polled, reported=reported
    )
    if role is Role.CANDIDATE:  # A71: it keeps trying the primary, spaced out, silently
        assert (plan.server, plan.at_once, plan.switch, plan.report_down) == (0, False, None, False)
        return
    assert plan.candidate == (plan.server != 0)
    if was is Phase.LIVE:  # A57: it worked, so it restarts at once on the same server
        assert (plan.server, plan.at_once, plan.switch) == (server, True, None)
        assert plan.report_down == (reported is not False and polled)
    elif server + 1 < servers and not all_cached:  # A71: the next server, at once
        assert (plan.server, plan.at_once, plan.switch) == (server + 1, True, "fallback")
        assert plan.report_down == (reported is not False)
    else:  # every server failed (or all is cached): the primary again, after the backoff
        assert (plan.server, plan.at_once) == (0, False)
        assert plan.switch == ("retry" if server else None)
        assert plan.report_down == (reported is not False)


def _response(version: str) -> DiscoveryResponse:
    r = DiscoveryResponse(version_info=version, type_url=CLUSTER, nonce=version)
    r.resources.add().Pack(Cluster(name="a"))
    return r


_DRIVER_INPUTS = st.lists(
    st.tuples(
        st.sampled_from(["step", "response", "failure", "probe_ok", "probe_down"]),
        st.integers(0, 3),  # which stream the driver holds (modulo their number)
        st.sampled_from([0.0, 0.05, 0.5, 1.0, 3.0]),  # time passing first
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(inputs=_DRIVER_INPUTS, cached=st.booleans())
def test_the_session_and_its_driver_agree_on_the_open_streams(
    inputs: list[tuple[str, int, float]], cached: bool
) -> None:
    s = Session(
        build_options(["p:1", "s:2"], node=Node(id="n"), backoff=POLICY,
                      fallback_probe_interval=0.5)
    )  # fmt: skip
    s.add_watch(resource_type(Cluster), frozenset({"a"}), EventBuffer(1000), None, 0.0)
    held: dict[str, int] = {}  # what a driver holds: key -> attempt
    attempts: set[int] = set()
    probes: list[ProbeServer] = []
    now, versions = 0.0, 0

    def perform(actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, OpenStream):
                assert action.attempt not in attempts  # attempts are never reused
                attempts.add(action.attempt)
                held[action.slot] = action.attempt  # the driver drops the key's old stream
            elif isinstance(action, CloseStream) and held.get(action.slot) == action.attempt:
                del held[action.slot]
            elif isinstance(action, ProbeServer):
                probes.append(action)

    for kind, pick, elapsed in inputs:
        now += elapsed
        streams = sorted(held.items())
        key, attempt = streams[pick % len(streams)] if streams else ("ads", 0)
        if kind == "step":
            perform(s.step(now))
        elif kind == "response" and (not cached or versions == 0):
            versions += 1
            s.on_response(key, attempt, _response(str(versions)), now)
        elif kind == "failure":
            s.on_failure(key, attempt, ConnectionError("reset"), now)
        elif kind.startswith("probe") and probes:
            probe = probes.pop(0)
            s.on_probe(probe.slot, probe.server, kind == "probe_ok", now)
        perform(s.step(now))
        (slot,) = s._slots.values()
        open_streams = {
            (st.key, st.attempt)
            for st in (slot.stream, slot.candidate)
            if st is not None and st.open
        }
        assert open_streams == set(held.items())
        assert slot.stream.role is (Role.PRIMARY if slot.stream.server == 0 else Role.FALLBACK)
        if slot.candidate is not None:  # A71: only beside a fallback, always to the primary
            assert slot.stream.server != 0
            assert slot.candidate.role is Role.CANDIDATE
            assert slot.candidate.server == 0
        elif slot.stream.server != 0:
            raise AssertionError("a fallback serves and nothing tries the primary")
    perform(s.close())
    assert held == {}
