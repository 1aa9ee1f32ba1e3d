"""Proof that each check checks: it fails on a server that breaks exactly its rule.

Every check runs against a proxy in front of a correct ControlPlane that
breaks that one rule (tests/conformance/_mutants.py), and the rest of the
suite for the same protocol must pass there. The mutants share one
ControlPlane, each as its own node, and run a few at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace

import pytest

from xds_client.conformance import ControlPlaneDriver, Report, arun, checks, render_table
from xds_client.testing import ControlPlane

from ._mutants import FAULTS, MutatingProxy
from ._rest_mutants import FAULTS as REST_FAULTS
from ._rest_mutants import RestMutant
from ._servers import FAST, serve, serve_second

pytestmark = pytest.mark.timeout(180)

_AT_ONCE = 8


def test_every_check_has_a_mutant() -> None:
    assert sorted(FAULTS) == sorted(c.id for c in checks() if c.protocol != "rest")


@pytest.fixture(scope="module")
def reports() -> Iterator[dict[str, Report]]:
    with ControlPlane(heartbeat_interval=0.2, max_workers=500) as cp:

        async def one(check_id: str, gate: asyncio.Semaphore) -> Report:
            node_id = f"mutant-{check_id}"
            serve(cp, node_id)
            serve_second(cp, f"{node_id}-second")
            async with gate:
                proxy = await asyncio.to_thread(MutatingProxy, cp.address, FAULTS[check_id]())
                try:
                    return await arun(
                        proxy.address,
                        protocols=[check_id.split("-", 1)[0]],  # type: ignore[list-item]
                        transports=["ads"],
                        options=replace(FAST, node_id=node_id, second_node_id=f"{node_id}-second"),
                        driver=ControlPlaneDriver(cp, node_id=node_id),
                    )
                finally:
                    await asyncio.to_thread(proxy.close)

        async def every() -> dict[str, Report]:
            gate = asyncio.Semaphore(_AT_ONCE)
            ids = sorted(FAULTS)
            done = await asyncio.gather(*(one(i, gate) for i in ids))
            return dict(zip(ids, done, strict=True))

        yield asyncio.run(every())


@pytest.mark.parametrize("check_id", sorted(FAULTS))
def test_the_check_fails_and_only_it(check_id: str, reports: dict[str, Report]) -> None:
    report = reports[check_id]
    verdicts = {r.check.id: (r.outcome, r.message) for r in report.results}
    assert verdicts[check_id][0] == "failed", verdicts[check_id]
    others = {k: v for k, v in verdicts.items() if k != check_id and v[0] != "passed"}
    assert others == {}, render_table(report, only_failures=True, evidence=True)
    failed = next(r for r in report.results if r.check.id == check_id)
    assert failed.evidence, "a failure shows the exchange"


def test_every_rest_check_has_a_mutant() -> None:
    assert sorted(REST_FAULTS) == sorted(c.id for c in checks() if c.protocol == "rest")


@pytest.fixture(scope="module")
def rest_reports() -> Iterator[dict[str, Report]]:
    with ControlPlane(heartbeat_interval=None) as cp:
        serve(cp)
        reports = {}
        for check_id, fault in sorted(REST_FAULTS.items()):
            mutant = RestMutant(cp.rest_url, fault)
            try:
                reports[check_id] = asyncio.run(
                    arun(mutant.url, options=replace(FAST, response_timeout=1.5))
                )
            finally:
                mutant.close()
        yield reports


@pytest.mark.parametrize("check_id", sorted(REST_FAULTS))
def test_the_rest_check_fails_and_only_it(check_id: str, rest_reports: dict[str, Report]) -> None:
    report = rest_reports[check_id]
    verdicts = {r.check.id: r.outcome for r in report.results}
    assert verdicts.pop(check_id) == "failed", render_table(report)
    assert set(verdicts.values()) == {"passed"}, render_table(report, evidence=True)
