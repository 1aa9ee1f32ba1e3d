"""The words of a conformance run: levels, protocols, transports, outcomes and the two
verdicts a check raises (used by the checks' context and by the model alike)."""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = ["Level", "Outcome", "Protocol", "Skip", "TransportKind", "Violation"]

Level: TypeAlias = Literal["MUST", "SHOULD"]
Protocol: TypeAlias = Literal["sotw", "delta", "rest"]
TransportKind: TypeAlias = Literal["ads", "per-type", "rest"]
Outcome: TypeAlias = Literal["passed", "failed", "skipped"]


class Violation(Exception):  # noqa: N818 - the check's verdict, raised to end it early
    """Raised inside a check: the server broke the check's rule (the message says how)."""


class Skip(Exception):  # noqa: N818 - a verdict too
    """Raised inside a check: the check cannot run against this server (the message says why)."""
