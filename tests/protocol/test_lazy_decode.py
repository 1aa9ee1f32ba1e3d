"""The memory-lean cache (``ProtocolConfig.lazy_decode``): bytes kept, decoded on access."""

from __future__ import annotations

from typing import Any

import pytest

from xds_client import resources
from xds_client.protocol import ResourceUpdated

from ._protocol_support import (
    V3,
    delta,
    delta_resource,
    delta_response,
    make,
    sotw,
    sotw_response,
    wrap,
)


def _updated(events: list[Any]) -> dict[str, Any]:
    return {e.name: e.resource for e in events if isinstance(e, ResourceUpdated)}


@pytest.mark.parametrize("kind", ["sotw", "delta"])
def test_lazy_cache_decodes_on_access_and_events_give_messages(kind: str) -> None:
    h: Any = sotw(V3, "single", lazy_decode=True) if kind == "sotw" else None
    if h is None:
        h = delta(V3, "single", lazy_decode=True)
    h.p.subscribe(resources.CLUSTER, None)
    h.start()
    clusters = [make(resources.CLUSTER, f"c{i}") for i in range(3)]
    if kind == "sotw":
        response: Any = sotw_response(resources.CLUSTER, "1", "n1", clusters)
    else:
        response = delta_response(
            resources.CLUSTER,
            "n1",
            [delta_resource(f"c{i}", c, version="1") for i, c in enumerate(clusters)],
        )
    events = h.receive(response)
    assert _updated(events) == {f"c{i}": c for i, c in enumerate(clusters)}
    cached = h.p.resources(resources.CLUSTER)
    for i, cluster in enumerate(clusters):
        entry = cached[f"c{i}"]
        assert entry.raw == cluster.SerializeToString()
        first, second = entry.resource, entry.resource
        assert first == cluster
        assert second == cluster
        assert first is not second  # decoded on each access, never held


def test_lean_sotw_events_hold_bytes_and_decode_on_first_access() -> None:
    """Lean mode keeps no decoded message of a SotW response alive: each message is
    checked as it is named and dropped, and an event decodes its bytes when its
    ``resource`` is first read (then keeps it)."""
    h = sotw(V3, "single", lazy_decode=True)
    h.p.subscribe(resources.CLUSTER, None)
    h.start()
    clusters = [make(resources.CLUSTER, f"c{i}") for i in range(3)]
    events = [e for e in h.receive(sotw_response(resources.CLUSTER, "1", "n1", clusters))
              if isinstance(e, ResourceUpdated)]  # fmt: skip
    assert [e._message for e in events] == [None, None, None]  # type: ignore[attr-defined]
    assert [e.resource for e in events] == clusters
    assert events[0].resource is events[0].resource  # decoded once, then kept
    assert events[0] == ResourceUpdated(resources.CLUSTER, "c0", "1", clusters[0])


def test_lean_sotw_checks_each_message_as_it_is_named() -> None:
    """The (validate.rules) NACK of lean mode is the one of decoded mode."""
    bad: Any = make(resources.CLUSTER, "c1")
    bad.connect_timeout.seconds = -1
    reasons = []
    for lean in (False, True):
        h = sotw(V3, "single", lazy_decode=lean)
        h.p.subscribe(resources.CLUSTER, None)
        h.start()
        good = make(resources.CLUSTER, "c0")
        events = h.receive(sotw_response(resources.CLUSTER, "1", "n1", [good, bad]))
        reasons.append([dict(e.errors) for e in events if hasattr(e, "errors")])
        assert list(h.p.resources(resources.CLUSTER)) == ["c0"]
    assert reasons[0] == reasons[1]
    assert "c1" in reasons[0][0]


def test_lazy_cache_skips_unchanged_bytes_and_stores_changes() -> None:
    h = sotw(V3, "single", lazy_decode=True)
    h.p.subscribe(resources.CLUSTER, None)
    h.start()
    clusters = [make(resources.CLUSTER, f"c{i}") for i in range(3)]
    h.receive(sotw_response(resources.CLUSTER, "1", "n1", clusters))
    h.flush()
    clusters[1] = make(resources.CLUSTER, "c1", "changed")
    events = h.receive(sotw_response(resources.CLUSTER, "2", "n2", clusters))
    assert list(_updated(events)) == ["c1"]
    assert h.p.resources(resources.CLUSTER)["c1"].resource == clusters[1]
    assert h.p.resources(resources.CLUSTER)["c1"].version == "2"
    assert h.p.resources(resources.CLUSTER)["c0"].version == "1"


def test_lazy_entry_stays_lazy_when_a_heartbeat_moves_its_ttl() -> None:
    h = sotw(V3, "single", lazy_decode=True)
    h.p.subscribe(resources.CLUSTER, ["c0"])
    h.start()
    cluster = make(resources.CLUSTER, "c0")
    h.receive(
        sotw_response(resources.CLUSTER, "1", "n1", [wrap("c0", cluster, version="a", ttl=5)])
    )
    h.flush()
    h.advance(2)
    h.receive(sotw_response(resources.CLUSTER, "2", "n2", [wrap("c0", None, version="a", ttl=5)]))
    entry = h.p.resources(resources.CLUSTER)["c0"]
    assert entry.ttl_deadline == pytest.approx(7.0)
    assert entry.resource == cluster
    assert entry.resource is not entry.resource


def test_default_cache_holds_the_decoded_message() -> None:
    h = delta(V3, "single")
    h.p.subscribe(resources.CLUSTER, None)
    h.start()
    cluster = make(resources.CLUSTER, "c0")
    h.receive(delta_response(resources.CLUSTER, "n1", [delta_resource("c0", cluster, version="1")]))
    entry = h.p.resources(resources.CLUSTER)["c0"]
    assert entry.resource is entry.resource
    assert entry.resource == cluster
