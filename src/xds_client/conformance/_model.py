"""What a conformance run is made of: checks, their results and the report."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ._render import render_table

if TYPE_CHECKING:
    from ._context import Context

__all__ = [
    "Check",
    "CheckResult",
    "Level",
    "Outcome",
    "Protocol",
    "Report",
    "Skip",
    "TransportKind",
    "Violation",
]

Level: TypeAlias = Literal["MUST", "SHOULD"]
Protocol: TypeAlias = Literal["sotw", "delta", "rest"]
TransportKind: TypeAlias = Literal["ads", "per-type", "rest"]
Outcome: TypeAlias = Literal["passed", "failed", "skipped"]


class Violation(Exception):  # noqa: N818 - the check's verdict, raised to end it early
    """Raised inside a check: the server broke the check's rule (the message says how)."""


class Skip(Exception):  # noqa: N818 - a verdict too
    """Raised inside a check: the check cannot run against this server (the message says why)."""


@dataclass(frozen=True)
class Check:
    """One rule of the xDS protocol and the code that tests a server against it."""

    id: str
    """Stable identifier, e.g. ``sotw-ack-no-resend`` (for ``--only``/``--skip``)."""
    rule: str
    """The rule, in one sentence."""
    source: str
    """Where the rule is written (a section of Envoy's xds_protocol.rst, an xRFC, a gRFC)."""
    level: Level
    """MUST (a failure fails the run) or SHOULD (reported only)."""
    protocol: Protocol
    """The variant of the protocol the check speaks."""
    run: Callable[[Context], Awaitable[str | None]] = field(repr=False, compare=False)
    """Runs the check; returns a note, raises :class:`Violation` or :class:`Skip`."""
    needs_push: bool = False
    """The check makes the server change a resource (needs a driver)."""
    transports: tuple[TransportKind, ...] = ("ads", "per-type")
    """The transports the check applies to."""


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check on one protocol and transport."""

    check: Check
    """The check."""
    transport: TransportKind
    """ADS or the per-type services."""
    outcome: Outcome
    """passed, failed or skipped."""
    message: str
    """Why it failed or was skipped (or a note when it passed)."""
    seconds: float
    """How long the check took."""
    evidence: tuple[dict[str, Any], ...] = ()
    """On failure, the requests and responses that show it (secrets redacted)."""

    @property
    def name(self) -> str:
        """``ID [transport]``: how tables and JUnit name the result."""
        return f"{self.check.id} [{self.transport}]"


@dataclass(frozen=True)
class Report:
    """Every result of a run, and the verdict."""

    server: str
    """The server checked (its address)."""
    results: tuple[CheckResult, ...]
    """One result per check, protocol and transport run."""
    seconds: float
    """How long the run took."""

    @property
    def ok(self) -> bool:
        """True when no MUST check failed (SHOULD failures are reported, not fatal)."""
        return not any(r.outcome == "failed" and r.check.level == "MUST" for r in self.results)

    @property
    def exit_code(self) -> int:
        """0 when :attr:`ok`, else 1 (the CLI's exit status)."""
        return 0 if self.ok else 1

    def failures(self, level: Level | None = None) -> list[CheckResult]:
        """The failed results (of one level, or all)."""
        return [r for r in self.results if r.outcome == "failed" and level in (None, r.check.level)]

    def outcome_of(self, check_id: str, transport: TransportKind = "ads") -> Outcome | None:
        """The outcome of one check on one transport, None if it did not run."""
        for r in self.results:
            if r.check.id == check_id and r.transport == transport:
                return r.outcome
        return None

    def raise_for_failures(self) -> None:
        """Raise AssertionError naming every failed MUST check (for a test suite)."""
        failed = self.failures("MUST")
        if failed:
            raise AssertionError(
                f"{len(failed)} MUST check(s) failed against {self.server}:\n"
                + render_table(self, only_failures=True, evidence=True)
            )
