"""Every ``(status, input)`` pair of the state table, walked on the real protocol.

For each pair, a SotW and a delta protocol bring the name ``a`` into the status
by public calls, check it is there, apply the input by public calls, and check
the status is the one the table names, CSDS shows it, and the does-not-exist
timer runs exactly in the timing statuses. The pairs are the table's own keys,
so a row nobody can reach (or one the core handles otherwise) fails here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from envoy.service.discovery.v3.discovery_pb2 import ResourceError
from google.protobuf.message import Message
from google.rpc.status_pb2 import Status as RpcStatus

from xds_client.protocol import DeltaProtocol, ProtocolConfig, SotwProtocol, _state
from xds_client.protocol._state import (
    CACHED,
    CSDS_STATUS,
    EVENT_TRIGGERED,
    IMPLICIT,
    TIMING,
    TRANSITIONS,
    Input,
    InternalStateError,
    ResourceStates,
    Status,
    transitions_markdown,
)
from xds_client.protocol._timers import DeadlineQueue

from ._protocol_support import (
    NODE,
    V3,
    bad_any,
    delta_resource,
    delta_response,
    make,
    sotw_response,
    wrap,
)

T = V3.eds  # not full state: only what the walk says removes "a"
TIMEOUT = 10.0
TTL = 100.0
NOT_FOUND, UNAVAILABLE = 5, 14
S, I = Status, Input  # noqa: E741 - short, like the table's


class Walk:
    """One protocol, one resource ``a``, public calls only."""

    def __init__(self, kind: str, mode: str, **flags: Any) -> None:
        config = ProtocolConfig(node=NODE, does_not_exist_timeout=TIMEOUT, **flags)
        self.p: Any = SotwProtocol(config) if kind == "sotw" else DeltaProtocol(config)
        self.delta = kind == "delta"
        self.now = 0.0
        self.n = 0
        self.raw = b""
        if mode in ("named", "both"):
            self.p.subscribe(T, ["a"])
        if mode in ("wild", "both"):
            self.p.subscribe(T, None)
        self.p.connected(self.now)  # not flushed: "a" is REQUESTED, no timer yet

    # ------------------------------------------------------------- inspection

    def status(self) -> Status:
        states: ResourceStates = self.p._types[T].states
        return states.get("a")

    def check(self, expected: Status) -> None:
        assert self.status() is expected
        timed = ("dne", T, "a") in self.p._timers
        assert timed == (expected in TIMING), "the timer runs exactly in the timing statuses"
        assert ("a" in self.p.resources(T)) == (expected in CACHED)
        shown = [s for s in self.p.resource_states(T) if s.name == "a"]
        if shown:
            assert shown[0].status == CSDS_STATUS[expected]
        else:  # not listed: neither wanted by name, nor cached, nor in an exceptional status
            assert expected is S.REQUESTED

    # ------------------------------------------------------------- wire

    def respond(self, body: Message | Any | None, errors: Sequence[tuple[int, str]] = ()) -> None:
        self.n += 1
        nonce = f"n{self.n}"
        if self.delta:
            res = [] if body is None else [delta_resource("a", body, version=nonce, ttl=TTL)]
            response: Any = delta_response(T, nonce, res)
        else:
            items = [] if body is None else [wrap("a", body, version=nonce, ttl=TTL)]
            response = sotw_response(T, nonce, nonce, items)
        for code, message in errors:
            error = ResourceError(error_detail=RpcStatus(code=code, message=message))
            error.resource_name.name = "a"
            response.resource_errors.append(error)
        self.p.receive(response, self.now)
        self.flush_replies()

    def flush_replies(self) -> None:
        # ACKs only: requests_to_send() would also send the first request (REQUEST_SENT).
        self.p._replies.clear()

    def flush(self) -> None:
        for request in self.p.requests_to_send():
            self.p.request_sent(request, self.now)

    def new_stream(self) -> None:
        self.p.disconnected(self.now)
        self.p.connected(self.now)
        self.flush()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.p.tick(self.now)

    # ------------------------------------------------------------- inputs

    def valid(self) -> None:
        body = make(T, "a", f"t{self.n}")
        self.raw = body.SerializeToString()
        self.respond(body)

    def same(self) -> None:
        self.respond(type(make(T, "a")).FromString(self.raw))

    def invalid(self) -> None:
        self.respond(bad_any(T))

    def not_found(self) -> None:
        self.respond(None, [(NOT_FOUND, "")])

    def error(self) -> None:
        self.respond(None, [(UNAVAILABLE, "down")])

    def restore(self) -> None:
        self.raw = make(T, "a", "disk").SerializeToString()
        restored, _ = self.p.restore(T, "v0", [("a", "r0", "r0", self.raw)], self.now)
        assert restored == ["a"]

    def server_changed(self) -> None:
        self.p.disconnected(self.now)
        self.p.server_changed()


INPUTS: dict[Input, Callable[[Walk], None]] = {
    I.SUBSCRIBED: lambda w: w.p.subscribe(T, ["a"]),
    I.REQUEST_SENT: Walk.new_stream,
    I.VALID_UPDATE: Walk.valid,
    I.SAME_BYTES: Walk.same,
    I.INVALID_UPDATE: Walk.invalid,
    I.DATA_ERROR_DROP: Walk.invalid,
    I.REMOVED: Walk.not_found,
    I.REMOVED_UNNAMED: Walk.not_found,
    I.REMOVAL_IGNORED: Walk.not_found,
    I.ERROR_REPORTED: Walk.error,
    I.TIMER_FIRED: lambda w: w.advance(TIMEOUT),
    I.TIMER_FIRED_TRANSIENT: lambda w: w.advance(TIMEOUT),
    I.TTL_EXPIRED: lambda w: w.advance(TTL + 1),
    I.STREAM_FAILED: lambda w: w.p.disconnected(w.now),
    I.SERVER_CHANGED: Walk.server_changed,
    I.UNNAMED: lambda w: w.p.unsubscribe(T, ["a"]),
    I.UNWANTED: lambda w: w.p.unsubscribe(T, ["a"]),
    I.RESTORED: Walk.restore,
}
"""How each input happens, by public calls."""

_MODE = {I.SUBSCRIBED: "wild", I.REMOVED_UNNAMED: "wild", I.UNNAMED: "both"}
_FLAGS: dict[Input, dict[str, bool]] = {
    I.DATA_ERROR_DROP: {"fail_on_data_errors": True},
    I.REMOVAL_IGNORED: {"ignore_resource_deletion": True},
    I.TIMER_FIRED_TRANSIENT: {"resource_timer_is_transient_error": True},
}


def reach(w: Walk, status: Status, flags: dict[str, bool]) -> None:
    """Bring ``a`` into ``status`` (from subscribed and connected, nothing sent)."""
    timeout = [w.flush, lambda: w.advance(TIMEOUT)]
    # With A88's fail_on_data_errors a NACK drops the value: restore it instead.
    drop = flags.get("fail_on_data_errors", False)
    steps: dict[Status, list[Callable[[], None]]] = {
        S.REQUESTED: [],
        S.TIMING: [w.flush],
        S.DOES_NOT_EXIST: [w.not_found],
        S.TIMEOUT: timeout,
        S.TIMEOUT_TIMING: [*timeout, w.new_stream],
        S.NACKED: [w.invalid],
        S.NACKED_TIMING: [w.invalid, w.flush],
        S.RECEIVED_ERROR: [w.error],
        S.RECEIVED_ERROR_TIMING: [w.error, w.flush],
        S.ACKED: [w.valid],
        S.CACHED_NACKED: [w.invalid, w.restore] if drop else [w.valid, w.invalid],
        S.CACHED_ERROR: [w.valid, w.error],
        S.DELETION_IGNORED: [w.valid, w.not_found],
    }
    for step in steps[status]:
        step()


_STATE_FLAGS: dict[Status, dict[str, bool]] = {
    S.TIMEOUT: {"resource_timer_is_transient_error": True},
    S.TIMEOUT_TIMING: {"resource_timer_is_transient_error": True},
    S.DELETION_IGNORED: {"ignore_resource_deletion": True},
}

PAIRS = sorted(TRANSITIONS)


@pytest.mark.parametrize("kind", ["sotw", "delta"])
@pytest.mark.parametrize(("status", "given"), PAIRS, ids=[f"{s.name}+{i.name}" for s, i in PAIRS])
def test_every_pair_of_the_table(kind: str, status: Status, given: Input) -> None:
    flags = {**_STATE_FLAGS.get(status, {}), **_FLAGS.get(given, {})}
    w = Walk(kind, _MODE.get(given, "named"), **flags)
    reach(w, status, flags)
    w.check(status)
    INPUTS[given](w)
    w.check(TRANSITIONS[status, given])


def test_every_input_has_a_driver_and_every_status_a_recipe() -> None:
    assert set(INPUTS) == set(Input)
    assert {s for s, _ in TRANSITIONS} == set(Status)
    assert {i for _, i in TRANSITIONS} == set(Input)


def test_inputs_fired_only_for_stored_names_are_no_ops_on_the_implicit_statuses() -> None:
    # The core skips these for names absent from the status dict (the hot path):
    # that is right only while their rows for REQUESTED and ACKED stay where they are
    # or lead to the other implicit status.
    for given in (I.SUBSCRIBED, I.SAME_BYTES, I.VALID_UPDATE, I.SERVER_CHANGED, I.UNNAMED):
        for status in IMPLICIT:
            target = TRANSITIONS.get((status, given))
            assert target is None or target in IMPLICIT, (status, given)
    assert TRANSITIONS[S.ACKED, I.UNWANTED] is S.REQUESTED
    assert TRANSITIONS.get((S.REQUESTED, I.REMOVED_UNNAMED)) is S.REQUESTED
    assert TRANSITIONS[S.ACKED, I.TTL_EXPIRED] is S.REQUESTED


def test_an_input_without_a_row_is_an_internal_error() -> None:
    timers: DeadlineQueue[tuple[str, str, str]] = DeadlineQueue()
    states = ResourceStates(T, lambda name: None, timers, TIMEOUT)
    with pytest.raises(
        InternalStateError, match="no transition for TTL_EXPIRED in status REQUESTED"
    ):
        states.fire("a", I.TTL_EXPIRED, 0.0)


def test_the_table_as_written_is_the_table() -> None:
    flat = {(s, i): t for s, row in EVENT_TRIGGERED.items() for i, t in row.items()}
    assert flat == TRANSITIONS


def test_the_enums_name_the_cores_ints_and_the_views_are_its_tables() -> None:
    # The core moves plain ints (S, I); Status and Input name exactly those, in order.
    def ints(namespace: type) -> list[tuple[str, int]]:
        return [(k, v) for k, v in vars(namespace).items() if k.isupper()]

    assert [(m.name, m.value) for m in Status] == ints(_state.S)
    assert [(m.name, m.value) for m in Input] == ints(_state.I)
    assert TRANSITIONS == _state._MOVES
    assert EVENT_TRIGGERED == _state._ROWS
    assert (TIMING, CACHED, IMPLICIT) == (_state._TIMING, _state._CACHED, _state._IMPLICIT)
    assert CSDS_STATUS == _state.CSDS_SHOWN
    # ... and the views hold members, not ints: repr and identity as before.
    for (status, given), target in TRANSITIONS.items():
        assert (type(status), type(given), type(target)) == (Status, Input, Status)
    assert all(type(s) is Status for s in (*TIMING, *CACHED, *IMPLICIT, *CSDS_STATUS))
    assert repr(TRANSITIONS[S.ACKED, I.UNWANTED]) == "<Status.REQUESTED: 0>"


def test_the_table_keeps_the_invariants_the_core_relies_on() -> None:
    assert _state.broken_invariants(_state._MOVES) == []
    # ... and the check sees a row that breaks one.
    filled = {**_state._MOVES, (S.REQUESTED, I.SUBSCRIBED): S.ACKED}
    assert _state.broken_invariants(filled) == [
        "REQUESTED + SUBSCRIBED: only an arrival fills the cache"
    ]
    timing = {**_state._MOVES, (S.TIMING, I.SERVER_CHANGED): S.NACKED_TIMING}
    assert _state.broken_invariants(timing) == ["TIMING + SERVER_CHANGED: timing to timing"]


def test_the_core_returns_the_same_statuses_by_int() -> None:
    timers: DeadlineQueue[tuple[str, str, str]] = DeadlineQueue()
    states = ResourceStates(T, lambda name: None, timers, TIMEOUT)
    assert states.fire("a", I.REQUEST_SENT, 0.0) == (S.REQUESTED, S.TIMING)
    assert states.get("a") is S.TIMING
    assert states.code("a") == S.TIMING
    assert ("dne", T, "a") in timers


def test_docs_show_the_table_as_it_is() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()
    match = re.search(r"<!-- state-table -->\n(.*?)<!-- /state-table -->", doc, re.DOTALL)
    assert match, "docs/protocol.md embeds the state table between state-table markers"
    assert match.group(1) == transitions_markdown(), (
        "docs/protocol.md is stale: paste xds_client.protocol._state.transitions_markdown()"
    )
