"""State learnt from one server is never sent to another (Envoy: envoy#35692, #43876)."""

from __future__ import annotations

import pytest

from xds_client.protocol import ProtocolUsageError

from ._protocol_support import V3, delta, delta_resource, delta_response, make, sotw, sotw_response


def test_sotw_sends_no_version_learnt_from_the_previous_server() -> None:
    h = sotw(V3, "single")
    h.p.subscribe(V3.cds, None)
    h.start()
    h.receive(sotw_response(V3.cds, "5", "n1", [make(V3.cds, "a")]))
    h.flush()
    h.p.disconnected(h.now)
    h.p.server_changed()
    (first,) = h.connect()
    assert first.version_info == ""
    assert first.response_nonce == ""
    assert "a" in h.p.resources(V3.cds)  # the cache carries over (A71)
    # Once the new server's response is accepted, its version is ours to resend.
    h.receive(sotw_response(V3.cds, "9", "m1", [make(V3.cds, "a")]))
    h.flush()
    h.p.disconnected(h.now)
    (again,) = h.connect()
    assert again.version_info == "9"


def test_delta_sends_no_initial_resource_versions_to_another_server() -> None:
    h = delta(V3, "single")
    h.p.subscribe(V3.cds, None)
    h.start()
    h.receive(delta_response(V3.cds, "n1", [delta_resource("a", make(V3.cds, "a"), version="v1")]))
    h.flush()
    h.p.disconnected(h.now)
    h.p.server_changed()
    (first,) = h.connect()
    assert dict(first.initial_resource_versions) == {}
    h.receive(delta_response(V3.cds, "m1", [delta_resource("a", make(V3.cds, "a"), version="w1")]))
    h.flush()
    h.p.disconnected(h.now)
    (again,) = h.connect()
    assert dict(again.initial_resource_versions) == {"a": "w1"}


def test_server_changed_is_refused_while_a_stream_is_up() -> None:
    h = sotw(V3, "single")
    h.p.subscribe(V3.cds, None)
    h.start()
    with pytest.raises(ProtocolUsageError, match="disconnected"):
        h.p.server_changed()
