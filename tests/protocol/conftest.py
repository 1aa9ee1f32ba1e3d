"""Fixtures for the protocol core tests: every rule runs for v3 and v2, ADS and single-type."""

from __future__ import annotations

import pytest

from ._protocol_support import V2, V3, Api


@pytest.fixture(params=[V3, V2], ids=lambda a: a.name)
def api(request: pytest.FixtureRequest) -> Api:
    value: Api = request.param
    return value


@pytest.fixture(params=["ads", "single"])
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value
