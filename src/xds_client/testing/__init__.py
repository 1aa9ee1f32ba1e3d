"""Test doubles that users get with xds_client: servers that run in-process.

- :class:`ControlPlane`: an xDS management server (gRPC ADS, per-type, delta,
  v2 and v3, REST-JSON) with snapshots, TTL heartbeats and fault injection.
- :class:`FaultProxy`: a TCP proxy in front of a server that cuts a response
  in the middle (what gRPC's server API cannot script).
- :class:`ResourceStoreServer`: Grafana's ResourceStore over SQLite.
- :class:`MockTransport` / :class:`AsyncMockTransport`: in-memory xDS streams
  scripted by a handler, passed as ``transport=`` to a client (no sockets).

Both bind 127.0.0.1 on a free port and stop every thread on exit. The pytest
plugin (``xds_client.testing.pytest_plugin``) offers them as fixtures.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._control_plane import ControlPlane
    from ._fault_proxy import FaultProxy
    from ._mock_transport import AsyncMockTransport, MockStream, MockTransport
    from ._resource_file import LoadedResources, ResourceFileError, load_resources
    from ._store._auth import AccessTokenCheck, mint_access_token
    from ._store_server import ResourceStoreServer
    from ._xds._log import RecordedRequest, RecordedResponse, StreamInfo, Subscription
    from ._xds._lrs import RecordedLoadReport
    from .pytest_plugin import AsyncXdsClientFactory, ConformanceRunner, ControlPlaneFactory

# public name -> module that defines it (loaded on first use)
_EXPORTS: dict[str, str] = {
    "ControlPlane": "xds_client.testing._control_plane",
    "FaultProxy": "xds_client.testing._fault_proxy",
    "MockTransport": "xds_client.testing._mock_transport",
    "AsyncMockTransport": "xds_client.testing._mock_transport",
    "MockStream": "xds_client.testing._mock_transport",
    "RecordedRequest": "xds_client.testing._xds._log",
    "RecordedResponse": "xds_client.testing._xds._log",
    "StreamInfo": "xds_client.testing._xds._log",
    "Subscription": "xds_client.testing._xds._log",
    "RecordedLoadReport": "xds_client.testing._xds._lrs",
    "load_resources": "xds_client.testing._resource_file",
    "LoadedResources": "xds_client.testing._resource_file",
    "ResourceFileError": "xds_client.testing._resource_file",
    "ResourceStoreServer": "xds_client.testing._store_server",
    "AccessTokenCheck": "xds_client.testing._store._auth",
    "mint_access_token": "xds_client.testing._store._auth",
    "ControlPlaneFactory": "xds_client.testing.pytest_plugin",
    "AsyncXdsClientFactory": "xds_client.testing.pytest_plugin",
    "ConformanceRunner": "xds_client.testing.pytest_plugin",
}

__all__: list[str] = [
    "ControlPlane",
    "FaultProxy",
    "MockTransport",
    "AsyncMockTransport",
    "MockStream",
    "RecordedRequest",
    "RecordedResponse",
    "StreamInfo",
    "Subscription",
    "RecordedLoadReport",
    "load_resources",
    "LoadedResources",
    "ResourceFileError",
    "AccessTokenCheck",
    "mint_access_token",
    "ResourceStoreServer",
    "ControlPlaneFactory",
    "AsyncXdsClientFactory",
    "ConformanceRunner",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'xds_client.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
