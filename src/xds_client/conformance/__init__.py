"""Check an xDS control plane against the protocol, rule by rule (SotW and delta).

The checker speaks to a server as a client would, and as a careless one would
(stale nonces, odd type URLs, unknown fields, huge names), and reports for each
rule whether the server keeps it, with the wire exchange that shows it when it
does not::

    from xds_client.conformance import run

    report = run("127.0.0.1:18000", protocols=["sotw"])
    print(report.ok, [r.name for r in report.failures()])

Checks that need the server to change a resource use a driver: a
:class:`ControlPlaneDriver` for the in-process :class:`~xds_client.testing.ControlPlane`,
a :class:`CommandDriver` (``xds-client conform --change-command``), or a callable
``hook(action, type_url, name)``. Without one they are skipped. See docs/conformance.md.
"""

from __future__ import annotations

from ._context import Options
from ._drivers import (
    ChangeHook,
    CommandDriver,
    ControlPlaneDriver,
    Driver,
    DriverError,
    HookDriver,
)
from ._model import (
    Check,
    CheckResult,
    Level,
    Outcome,
    Protocol,
    Report,
    TransportKind,
    render,
    render_json,
    render_junit,
    render_table,
)
from ._runner import arun, checks, run, select

__all__ = [
    "ChangeHook",
    "Check",
    "CheckResult",
    "CommandDriver",
    "ControlPlaneDriver",
    "Driver",
    "DriverError",
    "HookDriver",
    "Level",
    "Options",
    "Outcome",
    "Protocol",
    "Report",
    "TransportKind",
    "arun",
    "checks",
    "render",
    "render_json",
    "render_junit",
    "render_table",
    "run",
    "select",
]
