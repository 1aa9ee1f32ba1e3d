"""The import a user writes loads only what building a client needs."""

from __future__ import annotations

import subprocess
import sys

_CSDS = ("envoy.service.status.v3.csds_pb2", "envoy.admin.v3.config_dump_shared_pb2")


def _modules_after(code: str) -> set[str]:
    script = f"import sys\n{code}\nprint('\\n'.join(sys.modules))\n"
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, timeout=60, capture_output=True, text=True
    )
    return set(out.stdout.split())


def test_client_import_loads_no_csds_protos() -> None:
    loaded = _modules_after("from xds_client import XdsClient, AsyncXdsClient, Node")
    assert not loaded & set(_CSDS), "CSDS protos load only for config_dump()"
    assert "xds_client.client._csds" not in loaded


def test_config_dump_and_redact_still_load_them_on_first_use() -> None:
    loaded = _modules_after(
        "from xds_client.client import redact\n"
        "from xds_client import XdsClient, Node\n"
        "client = XdsClient('127.0.0.1:1', node=Node(id='n'))\n"
        "dump = client.config_dump()\n"
        "assert type(dump).__name__ == 'ClientConfig'\n"
        "client.close()\n"
        "assert callable(redact)\n"
    )
    assert set(_CSDS) <= loaded
