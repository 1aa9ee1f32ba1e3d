"""Load testing of xDS control planes: fleets of simulated clients.

``Fleet`` runs N simulated xDS clients in one asyncio loop, each with its own node,
HTTP/2 connection and ADS stream (SotW or delta), subscribing as Envoy or a gRPC
client does, and measures what they see: time to a first complete config, push to
ACK per type, the fleet's convergence per version, NACKs, reconnects and errors.
``xds-client load`` is its command line; ``xds_client.load.locust`` spreads fleets
over Locust workers. See ``docs/load.md``.
"""

from __future__ import annotations

from ._drivers import CallableDriver, CommandDriver, ControlPlaneDriver, PushError, UpdateDriver
from ._fleet import Fleet, check_fd_limit
from ._metrics import ClientStats, LoadEvent, Report, Sample, Summary, VersionResult, summarize
from ._options import FleetOptions
from ._plot import render_svg
from ._profile import Profile
from ._sample import SAMPLE_LISTENER, sample_config, sample_endpoints

__all__ = [
    "Fleet",
    "FleetOptions",
    "Profile",
    "check_fd_limit",
    # what it measures
    "Report",
    "ClientStats",
    "Summary",
    "Sample",
    "VersionResult",
    "LoadEvent",
    "summarize",
    "render_svg",
    # changing the server's config
    "UpdateDriver",
    "ControlPlaneDriver",
    "CommandDriver",
    "CallableDriver",
    "PushError",
    # a sample config
    "SAMPLE_LISTENER",
    "sample_config",
    "sample_endpoints",
]
