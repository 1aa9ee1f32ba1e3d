"""What a conformance run is made of: checks, their results and the report, and the
report as a table, JSON or JUnit XML (for a control plane's CI)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree as ET

from ._kinds import Level, Outcome, Protocol, Skip, TransportKind, Violation

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
    "render",
    "render_json",
    "render_junit",
    "render_table",
]


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


# ---------------------------------------------------------------------- the report's pictures

_MARK = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}


def _mark(result: CheckResult) -> str:
    if result.outcome == "failed" and result.check.level == "SHOULD":
        return "WARN"
    return _MARK[result.outcome]


def render_table(report: Report, *, only_failures: bool = False, evidence: bool = False) -> str:
    """One line per result (``RESULT LEVEL PROTOCOL/TRANSPORT ID  message``) and a summary."""
    rows = [r for r in report.results if not only_failures or r.outcome == "failed"]
    width = max((len(r.check.id) for r in rows), default=10)
    lines = []
    for r in rows:
        where = f"{r.check.protocol}/{r.transport}"
        line = f"{_mark(r):<4}  {r.check.level:<6}  {where:<14}  {r.check.id:<{width}}"
        if r.message:
            line += f"  {r.message}"
        lines.append(line.rstrip())
        if evidence and r.evidence:
            lines.append(f"      rule: {r.check.rule} ({r.check.source})")
            for entry in r.evidence:
                message = json.dumps(entry["message"], sort_keys=True)
                lines.append(
                    f"      {entry['at']:>7.3f}s stream {entry['stream']} "
                    f"{entry['direction']:<8} {message}"
                )
    counts = {k: sum(1 for r in report.results if _mark(r) == k) for k in _MARK.values()}
    counts["WARN"] = sum(1 for r in report.results if _mark(r) == "WARN")
    verdict = "conforms (every MUST passed)" if report.ok else "does NOT conform"
    lines.append(
        f"{report.server}: {verdict}; {counts['PASS']} passed, {counts['FAIL']} failed, "
        f"{counts['WARN']} SHOULD not met, {counts['SKIP']} skipped in {report.seconds:.1f} s"
    )
    return "\n".join(lines) + "\n"


def _result_dict(result: CheckResult) -> dict[str, Any]:
    return {
        "id": result.check.id,
        "protocol": result.check.protocol,
        "transport": result.transport,
        "level": result.check.level,
        "outcome": result.outcome,
        "rule": result.check.rule,
        "source": result.check.source,
        "message": result.message,
        "seconds": result.seconds,
        "evidence": list(result.evidence),
    }


def render_json(report: Report) -> str:
    """The whole report as one JSON document."""
    document = {
        "server": report.server,
        "ok": report.ok,
        "seconds": report.seconds,
        "results": [_result_dict(r) for r in report.results],
    }
    return json.dumps(document, indent=2) + "\n"


def render_junit(report: Report) -> str:
    """JUnit XML: a test suite per protocol and transport, a test case per check.

    A failed MUST is a ``<failure>``; a failed SHOULD passes with a warning in
    ``<system-err>``; a skipped check is ``<skipped>``. The evidence goes to
    ``<system-out>`` as JSON.
    """
    root = ET.Element("testsuites", name="xds-conformance", time=f"{report.seconds:.3f}")
    suites: dict[str, list[CheckResult]] = {}
    for r in report.results:
        suites.setdefault(f"{r.check.protocol}.{r.transport}", []).append(r)
    for name, results in suites.items():
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"xds-conformance.{name}",
            tests=str(len(results)),
            failures=str(sum(1 for r in results if _mark(r) == "FAIL")),
            skipped=str(sum(1 for r in results if r.outcome == "skipped")),
            time=f"{sum(r.seconds for r in results):.3f}",
        )
        for r in results:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"xds-conformance.{name}",
                name=r.check.id,
                time=f"{r.seconds:.3f}",
            )
            text = f"[{r.check.level}] {r.check.rule} ({r.check.source})"
            if r.outcome == "skipped":
                ET.SubElement(case, "skipped", message=r.message)
            elif r.outcome == "failed" and r.check.level == "MUST":
                failure = ET.SubElement(case, "failure", message=r.message, type="MUST")
                failure.text = text
            elif r.outcome == "failed":
                ET.SubElement(case, "system-err").text = f"SHOULD not met: {r.message}\n{text}"
            if r.evidence:
                ET.SubElement(case, "system-out").text = json.dumps(list(r.evidence), indent=1)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def render(report: Report, format: str = "table", *, evidence: bool = True) -> str:
    """``table``, ``json`` or ``junit``."""
    if format == "json":
        return render_json(report)
    if format == "junit":
        return render_junit(report)
    return render_table(report, evidence=evidence)
