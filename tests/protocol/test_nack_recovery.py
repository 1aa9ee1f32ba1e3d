"""A NACKed resource sent again unchanged clears its NACK, and its watchers hear it.

A control plane that rolls a bad change back (go-control-plane: a new snapshot version
holding the last good cluster) sends bytes the client already holds. The core moves the
resource from NACKED back to ACKED; without an event, a watcher that was told of the NACK
(``watch_config``'s graph, for one) would show the error for ever. So the first unchanged
resend after a NACK is announced as a :class:`ResourceUpdated` of the kept value, with the
new version; later unchanged resends stay silent.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message import Message

from xds_client.protocol import (
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
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


def reject_bad(message: Any) -> None:
    if message.alt_stat_name == "bad":
        raise ValueError("alt_stat_name 'bad' is refused")


@pytest.fixture(params=["sotw-bare", "sotw-wrapped", "delta"])
def shape(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def harness(shape: str, api: Api, mode: str, **config: Any) -> Harness[Any]:
    validators = {api.cds: reject_bad}
    if shape == "delta":
        return delta(api, mode, validators=validators, **config)
    return sotw(api, mode, validators=validators, **config)


def status(h: Harness[Any], name: str) -> str:
    (state,) = [s for s in h.p.resource_states(h.api.cds) if s.name == name]
    return str(state.status)


def send(h: Harness[Any], shape: str, version: str, clusters: list[Message]) -> list[Any]:
    """One response of ``clusters``, as ``shape`` says, at ``version``."""
    cds = h.api.cds
    if shape == "delta":
        items = [delta_resource(c.name, c, version=version) for c in clusters]  # type: ignore[attr-defined]
        return h.receive(delta_response(cds, f"n{version}", items, system_version=version))
    if shape == "sotw-wrapped":
        wrapped = [wrap(c.name, c) for c in clusters]  # type: ignore[attr-defined]
        return h.receive(sotw_response(cds, version, f"n{version}", wrapped))
    return h.receive(sotw_response(cds, version, f"n{version}", clusters))


def test_an_unchanged_resend_after_a_nack_is_announced_once(
    shape: str, api: Api, mode: str
) -> None:
    h = harness(shape, api, mode)
    h.p.subscribe(api.cds, None if shape != "delta" else ["c1", "c2"])
    h.start()
    good, other = make(api.cds, "c1", "good"), make(api.cds, "c2")
    send(h, shape, "1", [good, other])
    rejected = send(h, shape, "2", [make(api.cds, "c1", "bad"), other])
    assert isinstance(rejected[-1], ResponseRejected)
    assert status(h, "c1") == "NACKED"

    back = send(h, shape, "3", [good, other])
    updates = [e for e in back if isinstance(e, ResourceUpdated)]
    assert [(e.name, e.version) for e in updates] == [("c1", "3")]  # c2 never was NACKED
    assert updates[0].resource == good
    assert isinstance(back[-1], ResponseAccepted)
    assert status(h, "c1") == "ACKED"

    again = send(h, shape, "4", [good, other])
    assert names(again, ResourceUpdated) == []  # nothing to clear any more


def test_a_rejected_response_can_still_clear_another_resource(api: Api, mode: str) -> None:
    """A46: the valid part of a NACKed response applies, an unchanged resend included."""
    h = harness("sotw-bare", api, mode)
    h.p.subscribe(api.cds, None)
    h.start()
    good = make(api.cds, "c1", "good")
    send(h, "sotw-bare", "1", [good, make(api.cds, "c2")])
    send(h, "sotw-bare", "2", [make(api.cds, "c1", "bad"), make(api.cds, "c2")])
    mixed = send(h, "sotw-bare", "3", [good, make(api.cds, "c2", "bad")])
    assert names(mixed, ResourceUpdated) == ["c1"]
    last = mixed[-1]
    assert isinstance(last, ResponseRejected)
    assert set(last.errors) == {"c2"}


def test_nothing_is_announced_without_a_nack(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    assert isinstance(h.p, SotwProtocol)
    h.p.subscribe(api.cds, None)
    h.start()
    h.receive(sotw_response(api.cds, "1", "n1", [make(api.cds, "c1")]))
    same = h.receive(sotw_response(api.cds, "2", "n2", [make(api.cds, "c1")]))
    assert names(same, ResourceUpdated) == []
