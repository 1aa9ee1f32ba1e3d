"""Test doubles that users get with xds_client: servers that run in-process.

- :class:`ControlPlane`: an xDS management server (gRPC ADS, per-type, delta,
  v2 and v3, REST-JSON) with snapshots, TTL heartbeats and fault injection.
- :class:`ResourceStoreServer`: Grafana's ResourceStore over SQLite.

Both bind 127.0.0.1 on a free port and stop every thread on exit. The pytest
plugin (``xds_client.testing.pytest_plugin``) offers them as fixtures.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it (loaded on first use)
_EXPORTS: dict[str, str] = {}

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'xds_client.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
