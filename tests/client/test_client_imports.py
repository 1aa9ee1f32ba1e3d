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


# What the client import line does not load (issue #18): each is loaded by the feature
# named, and `python -X importtime` showed each costing the user line 1 to 10 ms.
_NOT_ON_THE_USER_LINE = (
    "pathlib",  # cache_dir files, jwt_token_file call credentials
    "urllib.parse",  # pathlib's, and xdstp percent-encoding
    "ipaddress",  # urllib.parse's
    "json",  # bootstrap parsing, cache_dir files, JWTs
    "tenacity",  # a user's own Backoff(strategy=...)
    "xds_client.transport._polling",  # the polling transports (grpc-fetch, rest)
    "xds_client.client._credentials",  # a bootstrap's call_creds
    "xds_client.client._csds",  # config_dump()
    "xds_client.client._protojson",  # to_dict / to_json
    "xds_client.store",  # the ResourceStore client
    "xds_client.graph",  # the config graph
    "xds_client.client._bootstrap",  # from_bootstrap, load_bootstrap, parse_bootstrap
    "xds_client.client._metrics",  # Metrics, CountingMetrics (a client takes any object)
    "queue",  # the threads backend uses the C SimpleQueue (_queue) only
)


def test_user_line_loads_none_of_the_optional_parts() -> None:
    loaded = _modules_after("from xds_client import XdsClient, AsyncXdsClient, Node")
    assert not loaded & set(_NOT_ON_THE_USER_LINE), sorted(loaded & set(_NOT_ON_THE_USER_LINE))


def test_a_client_that_is_built_and_closed_loads_none_of_them_either() -> None:
    # Deferred, not moved: building a client does not pull them in at construction.
    loaded = _modules_after(
        "from xds_client import XdsClient, Node\n"
        "XdsClient('127.0.0.1:1', node=Node(id='n')).close()\n"
    )
    assert not loaded & set(_NOT_ON_THE_USER_LINE), sorted(loaded & set(_NOT_ON_THE_USER_LINE))


def test_the_parts_still_load_when_used() -> None:
    loaded = _modules_after(
        "import tempfile, pathlib\n"
        "from xds_client import XdsClient, Node, Backoff\n"
        "from xds_client.client import parse_bootstrap\n"
        "from xds_client.transport import PollPolicy, make_transport, ServerTarget\n"
        "assert Backoff().state().next_delay() > 0\n"
        "d = tempfile.mkdtemp()\n"
        "token = pathlib.Path(d, 't')\n"
        "b = parse_bootstrap({'xds_servers': [{'server_uri': 'x:1', 'channel_creds': "
        "[{'type': 'insecure'}], 'call_creds': [{'type': 'jwt_token_file', "
        "'config': {'jwt_token_file': str(token)}}]}]})\n"
        "assert b.servers[0].call_credentials is not None\n"
        "XdsClient('127.0.0.1:1', node=Node(id='n'), cache_dir=d).close()\n"
        "make_transport('rest', ServerTarget('http://127.0.0.1:1'), poll_interval=1.0,"
        " asynchronous=False).close()\n"
    )
    for name in (
        "xds_client.client._persist",
        "random",
        "json",
        "xds_client.transport._polling",
        "xds_client.client._credentials",
    ):
        assert name in loaded, name


def test_client_args_compiles_no_forward_ref_but_for_what_the_line_does_not_load() -> None:
    # TypedDict compiles each string value into a ForwardRef when the module is imported.
    from typing import ForwardRef

    from xds_client.client._options import ClientArgs

    strings = [k for k, v in ClientArgs.__annotations__.items() if isinstance(v, ForwardRef)]
    assert strings == ["metrics"]


def test_the_lazy_client_names_are_the_modules_own() -> None:
    loaded = _modules_after(
        "import xds_client, xds_client.client as c\n"
        "from xds_client.client import _bootstrap, _metrics\n"
        "assert c.Bootstrap is _bootstrap.Bootstrap is xds_client.Bootstrap\n"
        "assert c.load_bootstrap is _bootstrap.load_bootstrap is xds_client.load_bootstrap\n"
        "assert c.parse_bootstrap is _bootstrap.parse_bootstrap\n"
        "assert c.Metrics is _metrics.Metrics is xds_client.Metrics\n"
        "assert c.CountingMetrics is _metrics.CountingMetrics is xds_client.CountingMetrics\n"
        "from xds_client.client import _persist\n"
        "assert c.ResourceRestored is _persist.ResourceRestored is xds_client.ResourceRestored\n"
        "from xds_client.client import *\n"
    )
    assert "xds_client.client._bootstrap" in loaded
