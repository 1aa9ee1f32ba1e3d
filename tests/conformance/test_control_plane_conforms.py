"""The whole suite passes against the correct ControlPlane, on every protocol and transport."""

from __future__ import annotations

import pytest

from xds_client.conformance import ControlPlaneDriver, Options, run
from xds_client.testing import ControlPlane

from ._servers import serve, serve_second

pytestmark = pytest.mark.timeout(120)


def test_every_check_passes_well_within_a_minute() -> None:
    with ControlPlane(heartbeat_interval=0.3) as cp:
        serve(cp)
        serve_second(cp, "second-node")
        report = run(
            cp.address,
            driver=ControlPlaneDriver(cp),
            options=Options(ttl_window=1.0, second_node_id="second-node"),
        )
    not_passed = [(r.name, r.outcome, r.message) for r in report.results if r.outcome != "passed"]
    assert not_passed == []
    assert report.ok
    assert report.exit_code == 0
    assert {(r.check.protocol, r.transport) for r in report.results} == {
        ("sotw", "ads"),
        ("sotw", "per-type"),
        ("delta", "ads"),
        ("delta", "per-type"),
    }
    assert report.seconds < 60


def test_without_a_driver_the_push_checks_are_skipped_and_say_why() -> None:
    with ControlPlane() as cp:
        serve(cp)
        report = run(cp.address, protocols=["delta"], transports=["ads"], only=["delta-removed-*"])
    (result,) = report.results
    assert result.outcome == "skipped"
    assert result.message.startswith("needs a push")
    assert report.ok
