"""Must be rejected by mypy: each line marked ``# expect: <code>`` is one error.

Excluded from the global mypy run in pyproject.toml; tests/test_stubs.py checks it.
"""

from __future__ import annotations

from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2

req = discovery_pb2.DiscoveryRequest()
req.version_info = 3  # expect: assignment
req.nonce_typo = "a"  # expect: attr-defined
discovery_pb2.DiscoveryRequest(node=base_pb2.Locality())  # expect: arg-type
req.HasField("not_a_field")  # expect: arg-type
