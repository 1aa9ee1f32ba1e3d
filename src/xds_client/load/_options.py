"""What a fleet simulates: :class:`FleetOptions`, checked when built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from xds_client.errors import UsageError

from ._profile import Profile
from ._sample import SAMPLE_LISTENER

__all__ = ["FleetOptions"]


@dataclass(frozen=True)
class FleetOptions:
    """What to simulate and how. Node fields are templates: ``{i}`` is the client's
    index (``node-{i}`` gives ``node-0``, ``node-1`` ...)."""

    server: str
    """``HOST:PORT`` of the xDS server (plaintext gRPC)."""
    nodes: int = 1
    """Clients to start (N)."""
    rate: float = 100.0
    """Clients started per second during the ramp (R)."""
    duration: float = 10.0
    """Seconds to hold the fleet after the ramp ends."""
    protocol: Literal["sotw", "delta"] = "sotw"
    profile: Profile = "envoy"
    """``envoy``: LDS and CDS wildcard, then RDS and EDS by name; ``grpc``: LDS for
    ``listener``, then RDS, CDS and EDS by name."""
    listener: str = SAMPLE_LISTENER
    """The listener a ``grpc``-profile client asks for (its target)."""
    node_id: str = "node-{i}"
    cluster: str = "load"
    region: str = ""
    zone: str = ""
    sub_zone: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """Node metadata (string values, templates too)."""
    validate: bool = False
    """Check every new resource against its proto's rules, as Envoy does (NACK on failure)."""
    keep_messages: bool = False
    """Keep decoded messages instead of bytes (costs several times the memory)."""
    storm_at: float | None = None
    """Seconds after the ramp ends to drop every stream at once (a reconnect storm)."""
    churn: float = 0.0
    """Share of the clients replaced by new ones per minute (0.1: one in ten)."""
    push_interval: float | None = None
    """Seconds between config changes made by the driver (update fan-out)."""
    connect_timeout: float = 10.0
    """Give up when no client has received anything after this many seconds."""
    first_index: int = 0
    """Index of the first client (Locust workers take disjoint ranges)."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise UsageError(f"nodes must be at least 1, got {self.nodes}")
        if not self.rate > 0:
            raise UsageError(f"rate must be positive, got {self.rate}")
        if self.duration < 0:
            raise UsageError(f"duration must not be negative, got {self.duration}")
        if not 0 <= self.churn <= 1:
            raise UsageError(f"churn is a share per minute between 0 and 1, got {self.churn}")
        if self.push_interval is not None and not self.push_interval > 0:
            raise UsageError(f"push_interval must be positive, got {self.push_interval}")
        if self.protocol not in ("sotw", "delta"):
            raise UsageError(f"protocol must be sotw or delta, got {self.protocol!r}")
        if self.profile not in ("envoy", "grpc"):
            raise UsageError(f"profile must be envoy or grpc, got {self.profile!r}")
        try:
            self.node_id.format(i=0)
        except (KeyError, IndexError, ValueError) as exc:
            raise UsageError(f"bad node id template {self.node_id!r}: {exc}") from None
