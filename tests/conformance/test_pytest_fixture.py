"""The ``xds_conformance`` fixture: a control plane's own test suite runs the checks."""

from __future__ import annotations

import pytest

from xds_client.testing import ConformanceRunner, ControlPlane

from ._mutants import MutatingProxy, SilentOnResubscribe
from ._servers import serve

pytestmark = pytest.mark.timeout(60)


def test_a_control_plane_passes(
    xds_conformance: ConformanceRunner, xds_control_plane: ControlPlane
) -> None:
    serve(xds_control_plane)
    report = xds_conformance(xds_control_plane, protocols=["delta"], transports=["ads"])
    assert report.ok
    assert report.outcome_of("delta-removed-on-delete") == "passed"  # the driver was used


def test_a_failed_must_fails_the_test_and_names_the_check(
    xds_conformance: ConformanceRunner, xds_control_plane: ControlPlane
) -> None:
    serve(xds_control_plane)
    proxy = MutatingProxy(xds_control_plane.address, SilentOnResubscribe())
    try:
        with pytest.raises(AssertionError, match="sotw-resubscribe-answered") as failed:
            xds_conformance(proxy.address, only=["sotw-resubscribe-*"], transports=["ads"])
        report = xds_conformance(
            proxy.address, only=["sotw-resubscribe-*"], transports=["ads"], strict=False
        )
    finally:
        proxy.close()
    assert "received" in str(failed.value)  # the wire exchange is shown
    assert not report.ok
