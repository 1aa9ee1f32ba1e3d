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


_ON_USE = (
    "tenacity",  # only for a user's own backoff strategy and the ResourceStore client
    "xds_client.protocol._rules",  # the (validate.rules) compiler: with the first check
    "hashlib",  # the persisted cache: only with cache_dir
    "tempfile",
    "html",  # the HTML view of the cache
    "google.protobuf.json_format",  # a bootstrap's node
)


def test_threaded_client_import_loads_nothing_it_does_not_use() -> None:
    loaded = _modules_after("from xds_client import XdsClient, Node")
    assert not loaded & set(_ON_USE), sorted(loaded & set(_ON_USE))
    # asyncio is not ours to avoid: ``import grpc`` loads it (grpc.aio) for every user.
    assert "xds_client.client._async" not in loaded


def test_both_clients_import_without_the_rule_compiler() -> None:
    loaded = _modules_after("from xds_client import XdsClient, AsyncXdsClient, Node")
    assert not loaded & set(_ON_USE), sorted(loaded & set(_ON_USE))


def test_validate_loads_the_rule_compiler_on_first_use() -> None:
    loaded = _modules_after(
        "from xds_client import validate\n"
        "from xds_client.protocol import validate as same\n"
        "assert validate is same\n"
        "from envoy.config.cluster.v3.cluster_pb2 import Cluster\n"
        "validate(Cluster(name='c'))\n"
    )
    assert "xds_client.protocol._rules" in loaded
