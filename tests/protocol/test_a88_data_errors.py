"""gRFC A88: the ``resource_timer_is_transient_error`` and ``fail_on_data_errors``
server features, and the TIMEOUT state (CSDS ``TIMEOUT``)."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.core.v3.base_pb2 import Node

from xds_client.client._csds import build_client_config
from xds_client.client._options import build_options
from xds_client.protocol import (
    ResourceDoesNotExist,
    ResourceErrorReported,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
    SotwProtocol,
)

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
    wrap,
)

DEADLINE_EXCEEDED = 4


@pytest.fixture(params=["sotw", "delta"])
def kind(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def harness(kind: str, **config: Any) -> Harness[Any]:
    made: Harness[Any] = (sotw if kind == "sotw" else delta)(V3, "single", **config)
    return made


def state(h: Harness[Any], name: str) -> Any:
    return next(s for s in h.p.resource_states(V3.cds) if s.name == name)


def test_timer_as_transient_error_reports_timeout_not_absence(kind: str) -> None:
    h = harness(kind, does_not_exist_timeout=5.0, resource_timer_is_transient_error=True)
    h.p.subscribe(V3.cds, ["a"])
    h.start()
    events = h.advance(6)
    assert names(events, ResourceDoesNotExist) == []
    assert events == [
        ResourceErrorReported(V3.cds, "a", DEADLINE_EXCEEDED, "not received within 5s")
    ]
    assert state(h, "a").status == "TIMEOUT"
    config = build_client_config(
        Node(id="n"), [(s, None) for s in h.p.resource_states(V3.cds)], lambda t: t
    )
    assert config.generic_xds_configs[0].client_status == 6  # TIMEOUT
    # It may still come; then it is a normal update.
    if kind == "sotw":
        events = h.receive(sotw_response(V3.cds, "1", "n1", [make(V3.cds, "a")]))
    else:
        events = h.receive(delta_response(V3.cds, "n1", [delta_resource("a", make(V3.cds, "a"))]))
    assert names(events, ResourceUpdated) == ["a"]
    assert state(h, "a").status == "ACKED"


def test_without_the_feature_the_timer_still_means_does_not_exist(kind: str) -> None:
    h = harness(kind, does_not_exist_timeout=5.0)
    h.p.subscribe(V3.cds, ["a"])
    h.start()
    assert names(h.advance(6), ResourceDoesNotExist) == ["a"]


def test_fail_on_data_errors_drops_the_cached_resource(kind: str) -> None:
    h = harness(kind, fail_on_data_errors=True)
    h.p.subscribe(V3.cds, ["a"])
    h.start()
    if isinstance(h.p, SotwProtocol):
        h.receive(sotw_response(V3.cds, "1", "n1", [make(V3.cds, "a")]))
        events = h.receive(sotw_response(V3.cds, "2", "n2", [wrap("a", bad_any(V3.cds))]))
    else:
        h.receive(delta_response(V3.cds, "n1", [delta_resource("a", make(V3.cds, "a"))]))
        events = h.receive(delta_response(V3.cds, "n2", [delta_resource("a", bad_any(V3.cds))]))
    assert [type(e) for e in events] == [ResourceRemoved, ResponseRejected]
    removed = events[0]
    assert isinstance(removed, ResourceRemoved)
    assert removed.reason == "data_error"
    assert h.p.resources(V3.cds) == {}
    assert state(h, "a").status == "NACKED"


def test_by_default_a_data_error_keeps_the_cached_resource(kind: str) -> None:
    h = harness(kind)
    h.p.subscribe(V3.cds, ["a"])
    h.start()
    if isinstance(h.p, SotwProtocol):
        h.receive(sotw_response(V3.cds, "1", "n1", [make(V3.cds, "a")]))
        h.receive(sotw_response(V3.cds, "2", "n2", [wrap("a", bad_any(V3.cds))]))
    else:
        h.receive(delta_response(V3.cds, "n1", [delta_resource("a", make(V3.cds, "a"))]))
        h.receive(delta_response(V3.cds, "n2", [delta_resource("a", bad_any(V3.cds))]))
    assert "a" in h.p.resources(V3.cds)


def test_the_client_takes_both_features_from_the_server() -> None:
    options = build_options(
        "127.0.0.1:1",
        server_features=["fail_on_data_errors", "resource_timer_is_transient_error"],
    )
    assert options.fail_on_data_errors
    assert options.resource_timer_is_transient_error
    assert not build_options("127.0.0.1:1").fail_on_data_errors
