"""xds_client: a typed client for Envoy xDS and Grafana's ResourceStore.

Names are loaded on first use, so ``import xds_client`` stays cheap: no
Envoy message module is imported until a program touches one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .client import (
        AsyncWatch,
        AsyncXdsClient,
        Authority,
        Backoff,
        Bootstrap,
        ConnectivityChanged,
        CountingMetrics,
        Metrics,
        ResourceRestored,
        Watch,
        WatchEvent,
        XdsClient,
        load_bootstrap,
        to_dict,
        to_json,
    )
    from .errors import (
        BootstrapError,
        ClientClosedError,
        ResourceDecodeError,
        ResourceError,
        ResourceNameError,
        ResourceNotFoundError,
        ResourceValidationError,
        RuleViolationError,
        ServerProtocolError,
        TransportError,
        TypeUrlMismatchError,
        UnknownResourceTypeError,
        UsageError,
        WaitTimeoutError,
        XdsClientError,
    )
    from .node import Locality, Node
    from .protocol import (
        DeltaProtocol,
        ProtocolConfig,
        ResourceDeletionIgnored,
        ResourceDoesNotExist,
        ResourceErrorReported,
        ResourceRemoved,
        ResourceUpdated,
        ResponseAccepted,
        ResponseRejected,
        SotwProtocol,
        validate,
    )
    from .resources import (
        ResourceType,
        UnwrappedResource,
        decode,
        is_full_state,
        message_class_of,
        register,
        resource_type,
        type_url_of,
        unwrap,
    )
    from .transport import ChannelCredentialsConfig, Keepalive, ServerTarget

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(
        [
            "XdsClientError",
            "UsageError",
            "UnknownResourceTypeError",
            "ClientClosedError",
            "ResourceError",
            "TypeUrlMismatchError",
            "ResourceDecodeError",
            "ResourceValidationError",
            "RuleViolationError",
            "ServerProtocolError",
            "BootstrapError",
            "TransportError",
            "WaitTimeoutError",
            "ResourceNotFoundError",
            "ResourceNameError",
        ],
        "xds_client.errors",
    ),
    **dict.fromkeys(
        [
            "XdsClient",
            "AsyncXdsClient",
            "Watch",
            "AsyncWatch",
            "WatchEvent",
            "ConnectivityChanged",
            "Backoff",
            "Metrics",
            "CountingMetrics",
            "Bootstrap",
            "load_bootstrap",
            "Authority",
            "ResourceRestored",
            "to_dict",
            "to_json",
        ],
        "xds_client.client",
    ),
    **dict.fromkeys(
        ["ServerTarget", "ChannelCredentialsConfig", "Keepalive"], "xds_client.transport"
    ),
    "Node": "xds_client.node",
    "Locality": "xds_client.node",
    **dict.fromkeys(
        [
            "ResourceType",
            "UnwrappedResource",
            "decode",
            "unwrap",
            "register",
            "resource_type",
            "type_url_of",
            "message_class_of",
            "is_full_state",
        ],
        "xds_client.resources",
    ),
    **dict.fromkeys(
        [
            "ProtocolConfig",
            "SotwProtocol",
            "DeltaProtocol",
            "ResourceUpdated",
            "ResourceRemoved",
            "ResourceDoesNotExist",
            "ResourceErrorReported",
            "ResponseRejected",
            "ResponseAccepted",
            "ResourceDeletionIgnored",
            "validate",
        ],
        "xds_client.protocol",
    ),
}

__all__ = [
    "__version__",
    "XdsClientError",
    "UsageError",
    "UnknownResourceTypeError",
    "ClientClosedError",
    "ResourceError",
    "TypeUrlMismatchError",
    "ResourceDecodeError",
    "ResourceValidationError",
    "RuleViolationError",
    "ServerProtocolError",
    "BootstrapError",
    "TransportError",
    "WaitTimeoutError",
    "ResourceNotFoundError",
    "Node",
    "Locality",
    "ResourceType",
    "UnwrappedResource",
    "decode",
    "unwrap",
    "register",
    "resource_type",
    "type_url_of",
    "message_class_of",
    "is_full_state",
    "ProtocolConfig",
    "SotwProtocol",
    "DeltaProtocol",
    "ResourceUpdated",
    "ResourceRemoved",
    "ResourceDoesNotExist",
    "ResourceErrorReported",
    "ResponseRejected",
    "ResponseAccepted",
    "ResourceDeletionIgnored",
    "validate",
    "XdsClient",
    "AsyncXdsClient",
    "Watch",
    "AsyncWatch",
    "WatchEvent",
    "ConnectivityChanged",
    "Backoff",
    "Metrics",
    "CountingMetrics",
    "Bootstrap",
    "load_bootstrap",
    "to_dict",
    "to_json",
    "ServerTarget",
    "ChannelCredentialsConfig",
    "Keepalive",
    "Authority",
    "ResourceRestored",
    "ResourceNameError",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'xds_client' has no attribute {name!r}")
    from ._gc import collector_paused

    # The modules made here live as long as the process: no collector passes over them.
    with collector_paused():
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
