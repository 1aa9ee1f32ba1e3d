"""Does-not-exist timers exactly as gRFC A57 says, for SotW and delta alike.

Start on the completed send over a connected stream; cancel on any arrival of the
name (valid or NACKed) and on stream failure; restart on the next stream only for
names with nothing cached. In delta, a subscribed name the server lists in
``removed_resources`` before ever sending it does not exist, at once.
"""

from __future__ import annotations

from typing import Any

import pytest

from xds_client.protocol import ResourceDoesNotExist, ResponseRejected, SotwProtocol

from ._protocol_support import (
    V3,
    Harness,
    bad_any,
    delta,
    delta_resource,
    delta_response,
    make,
    names,
    sotw,
    sotw_response,
)

TIMEOUT = 15.0


@pytest.fixture(params=["sotw", "delta"])
def h(request: pytest.FixtureRequest) -> Harness[Any]:
    make_harness = sotw if request.param == "sotw" else delta
    harness: Harness[Any] = make_harness(V3, "single", does_not_exist_timeout=TIMEOUT)
    return harness


def send_bad(h: Harness[Any], name: str, nonce: str) -> list[Any]:
    """A response carrying ``name`` with bytes that do not parse (so it is NACKed)."""
    if isinstance(h.p, SotwProtocol):
        from ._protocol_support import wrap

        return h.receive(sotw_response(V3.cds, "1", nonce, [wrap(name, bad_any(V3.cds))]))
    return h.receive(
        delta_response(V3.cds, nonce, [delta_resource(name, bad_any(V3.cds), version="1")])
    )


def test_a_nacked_name_is_never_reported_missing(h: Harness[Any]) -> None:
    h.p.subscribe(V3.cds, ["a"])
    h.start()
    events = send_bad(h, "a", "n1")
    assert [type(e) for e in events] == [ResponseRejected]
    h.flush()
    assert names(h.advance(TIMEOUT + 1), ResourceDoesNotExist) == []
    (state,) = h.p.resource_states(V3.cds)
    assert state.status == "NACKED"


def test_the_timer_starts_on_the_completed_send_not_on_the_queued_request(
    h: Harness[Any],
) -> None:
    h.p.subscribe(V3.cds, ["a"])
    h.p.connected(h.now)
    queued = h.p.requests_to_send()  # built, but the send never completes
    assert queued
    assert h.advance(TIMEOUT + 1) == []
    for request in queued:
        h.p.request_sent(request, h.now)
    assert h.advance(TIMEOUT - 1) == []
    assert names(h.advance(2), ResourceDoesNotExist) == ["a"]


def test_stream_failure_cancels_and_the_next_stream_restarts_only_uncached_names(
    h: Harness[Any],
) -> None:
    h.p.subscribe(V3.cds, ["have", "missing"])
    h.start()
    if isinstance(h.p, SotwProtocol):
        h.receive(sotw_response(V3.cds, "1", "n1", [make(V3.cds, "have")]))
    else:
        h.receive(delta_response(V3.cds, "n1", [delta_resource("have", make(V3.cds, "have"))]))
    h.flush()
    h.p.disconnected(h.now)
    assert h.advance(TIMEOUT + 1) == []  # no stream: no timer runs
    h.connect()
    assert h.p.next_deadline() == h.now + TIMEOUT
    assert names(h.advance(TIMEOUT), ResourceDoesNotExist) == ["missing"]


def test_delta_removal_of_a_never_received_name_is_does_not_exist_at_once() -> None:
    h = delta(V3, "single", does_not_exist_timeout=TIMEOUT)
    h.p.subscribe(V3.cds, ["gone"])
    h.start()
    events = h.receive(delta_response(V3.cds, "n1", removed=["gone"]))
    assert names(events, ResourceDoesNotExist) == ["gone"]
    assert h.p.next_deadline() is None  # its timer is cancelled too
    (state,) = h.p.resource_states(V3.cds)
    assert state.status == "DOES_NOT_EXIST"


def test_delta_removal_without_a_timer_still_says_does_not_exist() -> None:
    h = delta(V3, "single", does_not_exist_timeout=None)
    h.p.subscribe(V3.cds, ["gone"])
    h.start()
    events = h.receive(delta_response(V3.cds, "n1", removed=["gone"]))
    assert names(events, ResourceDoesNotExist) == ["gone"]
