"""Shared test configuration."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# CI machines are small and shared: no per-example deadline, a fixed example budget.
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "150")),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci")
