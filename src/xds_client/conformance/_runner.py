"""Running the checks against a server: discovery, then every selected check."""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import time
from collections.abc import Iterable, Sequence

import grpc

from xds_client._backends.asyncio import open_channel
from xds_client.errors import ServerProtocolError, TransportError, UsageError
from xds_client.transport import ServerTarget
from xds_client.transport._channel import channel_arguments

from ._checks import CHECKS
from ._context import Context, Inventory, Options
from ._discover import ServiceNotOfferedError, discover
from ._drivers import ChangeHook, Driver, DriverError, HookDriver
from ._model import Check, CheckResult, Protocol, Report, Skip, TransportKind, Violation
from ._rest import discover_rest
from ._wire import Wire

__all__ = ["arun", "checks", "run", "select"]

# Checks run this many at a time (those that push run alone, after the others).
_CONCURRENCY = 6


_PROTOCOL_ORDER = {"sotw": 0, "delta": 1, "rest": 2}


def checks() -> list[Check]:
    """Every check, in a stable order (SotW, then delta, then REST)."""
    return sorted(CHECKS, key=lambda c: (_PROTOCOL_ORDER[c.protocol], c.id))


def select(
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    protocols: Iterable[Protocol] = ("sotw", "delta"),
) -> list[Check]:
    """The checks whose id matches a pattern of ``only`` (all if empty) and none of ``skip``.

    Patterns are ids or shell globs (``sotw-*``); one that matches nothing is a UsageError.
    """
    known = checks()
    only, skip = list(only), list(skip)
    for pattern in only + skip:
        if not any(fnmatch.fnmatchcase(c.id, pattern) for c in known):
            raise UsageError(
                f"no check matches {pattern!r}; the checks are: {', '.join(c.id for c in known)}"
            )
    wanted = set(protocols)
    return [
        c
        for c in known
        if c.protocol in wanted
        and (not only or any(fnmatch.fnmatchcase(c.id, p) for p in only))
        and not any(fnmatch.fnmatchcase(c.id, p) for p in skip)
    ]


def _target(server: str | ServerTarget) -> ServerTarget:
    return server if isinstance(server, ServerTarget) else ServerTarget(uri=server)


def _own_connection(target: ServerTarget) -> ServerTarget:
    # grpcio shares one connection per target between a process's channels unless told.
    extra = (("grpc.use_local_subchannel_pool", 1),)
    return dataclasses.replace(target, channel_options=target.channel_options + extra)


def _driver(driver: Driver | ChangeHook | None) -> Driver | None:
    if driver is None or isinstance(driver, Driver):
        return driver
    return HookDriver(driver)


async def _run_one(
    check: Check,
    *,
    transport: TransportKind,
    channel: grpc.aio.Channel,
    target: ServerTarget,
    options: Options,
    inventory: Inventory,
    driver: Driver | None,
) -> CheckResult:
    wire = Wire(
        channel,
        target.call_metadata,
        lambda: open_channel(*channel_arguments(_own_connection(target))),
    )
    ctx = Context(
        protocol=check.protocol,
        transport=transport,
        options=options,
        inventory=inventory,
        wire=wire,
        driver=driver,
    )
    budget = 6 * options.response_timeout + options.ttl_window + 2 * options.quiet_period
    start = time.monotonic()
    evidence: tuple[dict[str, object], ...] = ()
    try:
        note = await asyncio.wait_for(check.run(ctx), budget)
        outcome, message = "passed", note or ""
    except Violation as exc:
        outcome, message = "failed", str(exc)
        evidence = wire.evidence()
    except Skip as exc:
        outcome, message = "skipped", str(exc)
    except DriverError as exc:
        outcome, message = "skipped", f"the driver failed: {exc}"
    except asyncio.TimeoutError:
        outcome, message = "failed", f"the check did not finish within {budget:g} s"
        evidence = wire.evidence()
    finally:
        await wire.close()
    return CheckResult(
        check,
        transport,
        outcome,  # type: ignore[arg-type]
        message,
        round(time.monotonic() - start, 3),
        evidence,
    )


async def _run_combination(
    runnable: list[Check],
    *,
    protocol: Protocol,
    transport: TransportKind,
    channel: grpc.aio.Channel,
    target: ServerTarget,
    options: Options,
    driver: Driver | None,
) -> list[CheckResult]:
    """Find what the server serves, run the quiet checks together, then those that push."""
    wire = Wire(channel, target.call_metadata)
    probe = Context(
        protocol=protocol,
        transport=transport,
        options=options,
        inventory=Inventory(),
        wire=wire,
        driver=None,
    )
    try:
        inventory = await discover(probe)
    except ServiceNotOfferedError as exc:
        return [CheckResult(c, transport, "skipped", str(exc), 0.0) for c in runnable]
    except (TransportError, ServerProtocolError) as exc:
        return [CheckResult(c, transport, "failed", f"not checked: {exc}", 0.0) for c in runnable]
    finally:
        await wire.close()
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def one(check: Check) -> CheckResult:
        async with gate:
            return await _run_one(
                check,
                transport=transport,
                channel=channel,
                target=target,
                options=options,
                inventory=inventory,
                driver=driver,
            )

    # Pushes change what other checks watch: they run alone, after the others.
    results = list(await asyncio.gather(*(one(c) for c in runnable if not c.needs_push)))
    for pushing in (c for c in runnable if c.needs_push):
        results.append(await one(pushing))
    return results


async def arun(
    server: str | ServerTarget,
    *,
    protocols: Sequence[Protocol] = ("sotw", "delta"),
    transports: Sequence[TransportKind] = ("ads", "per-type"),
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    options: Options | None = None,
    driver: Driver | ChangeHook | None = None,
) -> Report:
    """Check the xDS server at ``server`` (``host:port`` or a :class:`ServerTarget`).

    ``driver`` makes the server change resources for the checks that need a
    push (a :class:`Driver` or a callable ``hook(action, type_url, name)``);
    without one they are skipped.
    """
    options = options or Options()
    target = _target(server)
    start = time.monotonic()
    if target.uri.startswith(("http://", "https://")):
        # A REST-JSON server: only the polling checks apply.
        results = await _run_rest(select(only, skip, ("rest",)), target, options)
        return _report(target, results, start)
    selected = select(only, skip, protocols)
    change = _driver(driver)
    results = []
    channel = open_channel(*channel_arguments(target))
    try:
        for protocol in protocols:
            mine = [c for c in selected if c.protocol == protocol]
            for transport in transports:
                runnable = [c for c in mine if transport in c.transports]
                if not runnable:
                    continue
                results += await _run_combination(
                    runnable,
                    protocol=protocol,
                    transport=transport,
                    channel=channel,
                    target=target,
                    options=options,
                    driver=change,
                )
    finally:
        await channel.close()
    if results and all(r.message.startswith("not checked: ") for r in results):
        # No combination reached the server: that is an error, not a report.
        raise TransportError(results[0].message.removeprefix("not checked: "))
    return _report(target, results, start)


def _report(target: ServerTarget, results: list[CheckResult], start: float) -> Report:
    order = {c.id: i for i, c in enumerate(checks())}
    results.sort(
        key=lambda r: (_PROTOCOL_ORDER[r.check.protocol], r.transport != "ads", order[r.check.id])
    )
    return Report(target.uri, tuple(results), round(time.monotonic() - start, 3))


async def _run_rest(
    runnable: list[Check], target: ServerTarget, options: Options
) -> list[CheckResult]:
    def context(wire: Wire) -> Context:
        return Context(
            protocol="rest",
            transport="rest",
            options=options,
            inventory=inventory,
            wire=wire,
            driver=None,
            rest_url=target.uri,
        )

    inventory = Inventory()
    await discover_rest(context(Wire(None, target.call_metadata)))
    if not inventory.names:
        raise TransportError(
            f"{target.uri}: no CDS or LDS poll of node {options.node_id!r} was answered with "
            "resources (is that a node it serves? see --node-id)"
        )
    results = []
    for check in runnable:  # one at a time: REST servers are often single-worker
        wire = Wire(None, target.call_metadata)
        begun = time.monotonic()
        evidence: tuple[dict[str, object], ...] = ()
        try:
            note = await check.run(context(wire))
            outcome, message = "passed", note or ""
        except Violation as exc:
            outcome, message, evidence = "failed", str(exc), wire.evidence()
        except Skip as exc:
            outcome, message = "skipped", str(exc)
        results.append(
            CheckResult(
                check,
                "rest",
                outcome,  # type: ignore[arg-type]
                message,
                round(time.monotonic() - begun, 3),
                evidence,
            )
        )
    return results


def run(
    server: str | ServerTarget,
    *,
    protocols: Sequence[Protocol] = ("sotw", "delta"),
    transports: Sequence[TransportKind] = ("ads", "per-type"),
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    options: Options | None = None,
    driver: Driver | ChangeHook | None = None,
) -> Report:
    """:func:`arun` from synchronous code (not from inside a running event loop)."""
    return asyncio.run(
        arun(
            server,
            protocols=protocols,
            transports=transports,
            only=only,
            skip=skip,
            options=options,
            driver=driver,
        )
    )
