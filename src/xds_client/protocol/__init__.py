"""The sans-I/O xDS protocol core: SotW and delta state machines.

Nothing here does I/O or reads a clock. A driver (thread, asyncio task or
poller) feeds in subscription changes, stream events, decoded responses and
``now``; it sends the requests the core returns and hands the events to
watchers. See ``docs/protocol.md`` for the exact behaviour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xds_client.errors import ProtocolUsageError

from ._cache import CachedResource, ResourceState, ResourceStatus
from ._config import ProtocolConfig, Validator
from ._delta import DeltaProtocol
from ._events import (
    Event,
    RemovalReason,
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceErrorReported,
    ResourceRemoved,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
)
from ._sotw import SotwProtocol
from ._subscriptions import WILDCARD
from ._validation import MAX_ERROR_MESSAGE, RESPONSE_KEY

if TYPE_CHECKING:
    from ._rules import validate

__all__ = [
    # state machines
    "SotwProtocol",
    "DeltaProtocol",
    "ProtocolConfig",
    "Validator",
    # events
    "Event",
    "ResourceUpdated",
    "ResourceRemoved",
    "RemovalReason",
    "ResourceDoesNotExist",
    "ResourceDeletionIgnored",
    "ResourceErrorReported",
    "ResponseAccepted",
    "ResponseRejected",
    # checking resources as Envoy does
    "validate",
    # state views
    "CachedResource",
    "ResourceState",
    "ResourceStatus",
    # errors and constants
    "ProtocolUsageError",
    "WILDCARD",
    "RESPONSE_KEY",
    "MAX_ERROR_MESSAGE",
]


def __getattr__(name: str) -> Any:
    # The rule compiler (regexes, ipaddress, urllib) loads with the first check.
    if name == "validate":
        from ._rules import validate as value

        globals()[name] = value
        return value
    raise AttributeError(f"module 'xds_client.protocol' has no attribute {name!r}")
