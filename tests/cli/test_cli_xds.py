"""watch, fetch and dump against an in-process ControlPlane, run through main()."""

from __future__ import annotations

import importlib
import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.base_pb2 import DataSource
from envoy.extensions.transport_sockets.tls.v3.common_pb2 import TlsCertificate
from envoy.extensions.transport_sockets.tls.v3.secret_pb2 import Secret
from google.protobuf.duration_pb2 import Duration

from xds_client.cli import run
from xds_client.resources import CLUSTER, ENDPOINT, V2_CLUSTER
from xds_client.testing import ControlPlane

from .conftest import Result

pytestmark = pytest.mark.timeout(60)

KEYS = {"event", "type_url", "name", "version", "reason", "error", "resource"}
SECRET_TEXT = "-----BEGIN PRIVATE KEY----- do not print me"


def test_watch_json_prints_connected_then_the_resource(cli: Any, served: ControlPlane) -> None:
    result: Result = cli("watch", "--server", served.address, "--json", "--count", "1", "cds")
    assert result.code == 0, result.err
    records = result.json_lines()
    # stdout is data only: the connectivity note went to stderr.
    assert [r["event"] for r in records] == ["updated"]
    assert "connected" in result.err
    assert all(r.keys() >= KEYS for r in records)
    updated = records[0]
    assert updated["type_url"] == CLUSTER
    assert (updated["name"], updated["version"]) == ("backend", "1")
    assert updated["resource"]["connect_timeout"] == "1s"
    assert updated["resource"]["eds_cluster_config"] == {"eds_config": {"ads": {}}}


def test_watch_resolves_nested_any_in_json(cli: Any, served: ControlPlane) -> None:
    result = cli("watch", "-s", served.address, "--json", "--count", "1", "--delta", "lds")
    assert result.code == 0, result.err
    listener = result.json_lines()[-1]["resource"]
    manager = listener["api_listener"]["api_listener"]
    assert manager["@type"].endswith("HttpConnectionManager")
    assert manager["rds"]["route_config_name"] == "local-routes"


def test_watch_text_per_type_delta(cli: Any, served: ControlPlane) -> None:
    result = cli("watch", "-s", served.address, "--delta", "--no-ads", "--count", "1", "eds")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "connected" in result.err
    assert "updated" in lines[0]
    assert "EDS" in lines[0]
    assert "backend" in lines[0]


@pytest.mark.parametrize(
    "spec", [ENDPOINT, "envoy.config.endpoint.v3.ClusterLoadAssignment", "EDS"]
)
def test_watch_type_by_url_message_name_or_alias(cli: Any, served: ControlPlane, spec: str) -> None:
    result = cli("watch", "-s", served.address, "--json", "--count", "1", spec, "backend")
    assert result.code == 0, result.err
    assert result.json_lines()[-1]["type_url"] == ENDPOINT


def test_watch_api_v2(cli: Any, served: ControlPlane) -> None:
    served.set_resources(V2_CLUSTER, [Cluster(name="legacy")])
    result = cli("watch", "-s", served.address, "--api", "v2", "--json", "--count", "1", "cds")
    assert result.code == 0, result.err
    last = result.json_lines()[-1]
    assert (last["type_url"], last["name"]) == (V2_CLUSTER, "legacy")


def test_watch_timeout_ends_a_quiet_watch(cli: Any, served: ControlPlane) -> None:
    result = cli("watch", "-s", served.address, "--timeout", "1", "cds", "backend")
    assert result.code == 0, result.err
    assert len(result.out.splitlines()) == 1
    assert "updated" in result.out


def test_watch_timeout_without_any_answer_fails(cli: Any, served: ControlPlane) -> None:
    # The server never answers for a name it does not have (SotW EDS): not a success.
    result = cli("watch", "-s", served.address, "--timeout", "0.5", "eds", "nothing-here")
    assert result.code == 1
    assert result.out == ""
    assert "no xDS response" in result.err


def test_watch_follows_changes_nacks_and_removals(served: ControlPlane) -> None:
    out, err = io.StringIO(), io.StringIO()
    argv = ["watch", "-s", served.address, "--json", "--count", "4", "--timeout", "20", "cds"]
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(run(argv, out, err)))
    worker.start()
    try:
        served.wait_for_ack("cds", version="1", timeout=10)
        served.set_resources(
            "cds", [Cluster(name="backend", connect_timeout=Duration(seconds=2))], version="2"
        )
        served.wait_for_ack("cds", version="2", timeout=10)
        served.set_resources("cds", {"bad": b"\xff\xff not a cluster"}, version="3")
        served.wait_for_nack("cds", version="3", timeout=10)
        served.set_resources("cds", [], version="4")
    finally:
        worker.join(20)
    assert codes == [0], err.getvalue()
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    resource_events = [r for r in records if r["event"] not in ("connected", "disconnected")]
    assert [r["event"] for r in resource_events] == ["updated", "updated", "nacked", "removed"]
    assert resource_events[1]["resource"]["connect_timeout"] == "2s"
    assert resource_events[2]["version"] == "3"
    assert "cannot decode" in resource_events[2]["error"]
    assert (resource_events[3]["name"], resource_events[3]["reason"]) == ("backend", "deleted")


def test_fetch_grpc_prints_a_table(cli: Any, served: ControlPlane) -> None:
    result = cli("fetch", "-s", served.address, "eds", "backend", "missing")
    assert result.code == 1, result.err  # one asked for by name does not exist: kubectl's 1
    lines = result.out.splitlines()
    assert lines[0].split() == ["TYPE", "NAME", "VERSION"]
    assert lines[1].split() == ["EDS", "backend", "1"]
    assert "missing" in lines[2]
    assert "does not exist" in lines[2]
    assert served.streams()[-1].kind == "fetch"


def test_fetch_rest_json(cli: Any, served: ControlPlane) -> None:
    result = cli("fetch", "-s", served.rest_url, "--json", "cds", "backend", "missing")
    assert result.code == 1, result.err
    records = result.json_lines()
    assert [(r["event"], r["name"]) for r in records] == [
        ("updated", "backend"),
        ("does_not_exist", "missing"),
    ]
    assert records[0]["resource"]["name"] == "backend"
    assert any(s.kind == "rest" for s in served.streams())


def _secret_material(served: ControlPlane) -> None:
    key = DataSource(inline_string=SECRET_TEXT)
    served.set_resources(
        "sds", [Secret(name="tls", tls_certificate=TlsCertificate(private_key=key))]
    )
    # No stubs for tls_pb2; and importing it here changes nothing: the CLI imports it anyway.
    tls: Any = importlib.import_module("envoy.extensions.transport_sockets.tls.v3.tls_pb2")
    context = tls.UpstreamTlsContext()
    context.common_tls_context.tls_certificates.add().private_key.inline_string = SECRET_TEXT
    cluster = Cluster(name="secure", connect_timeout=Duration(seconds=1))
    cluster.transport_socket.name = "envoy.transport_sockets.tls"
    cluster.transport_socket.typed_config.Pack(context)
    served.update("cds", [cluster])


def test_dump_text_lists_every_resource(cli: Any, served: ControlPlane) -> None:
    result = cli("dump", "-s", served.address, "--node-id", "dumper", "--cluster", "c1")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert result.err.splitlines()[0] == "node dumper (cluster c1)"  # a note, not data
    rows = {tuple(line.split()) for line in lines[1:]}
    assert rows == {
        ("LDS", "ingress", "1", "ACKED"),
        ("RDS", "local-routes", "1", "ACKED"),
        ("CDS", "backend", "1", "ACKED"),
        ("EDS", "backend", "1", "ACKED"),
    }


def test_dump_json_redacts_secrets_even_inside_any(cli: Any, served: ControlPlane) -> None:
    _secret_material(served)
    result = cli("dump", "-s", served.address, "--json", "cds", "sds")
    assert result.code == 0, result.err
    assert SECRET_TEXT not in result.out
    (dump,) = result.json_lines()
    by_name = {c["name"]: c for c in dump["generic_xds_configs"]}
    secret = by_name["tls"]["xds_config"]
    assert secret["tls_certificate"]["private_key"] == {"inline_string": "[redacted]"}
    tls = by_name["secure"]["xds_config"]["transport_socket"]["typed_config"]
    assert tls["common_tls_context"]["tls_certificates"][0]["private_key"] == {
        "inline_string": "[redacted]"
    }


def test_watch_json_redacts_secrets(cli: Any, served: ControlPlane) -> None:
    _secret_material(served)
    result = cli("watch", "-s", served.address, "--json", "--count", "1", "sds", "tls")
    assert result.code == 0, result.err
    assert SECRET_TEXT not in result.out
    assert "[redacted]" in result.out


def test_watch_with_bootstrap_file(cli: Any, served: ControlPlane, tmp_path: Path) -> None:
    bootstrap = tmp_path / "bootstrap.json"
    bootstrap.write_text(
        json.dumps(
            {
                "xds_servers": [
                    {"server_uri": served.address, "channel_creds": [{"type": "insecure"}]}
                ],
                "node": {"id": "from-bootstrap"},
            }
        )
    )
    result = cli("watch", "--bootstrap", str(bootstrap), "--json", "--count", "1", "cds")
    assert result.code == 0, result.err
    assert result.json_lines()[-1]["name"] == "backend"
    node = served.streams()[-1].node
    assert node is not None
    assert node.id == "from-bootstrap"


def _one_error_line(result: Result) -> str:
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "code", "text"),
    [
        (["watch", "--server", "nonsense", "cds"], 2, "bad server address 'nonsense'"),
        (["watch", "--server", "host:99999", "cds"], 2, "bad server address"),
        (["watch", "cds"], 2, "give the xDS server with --server"),
        (["watch", "--server", "127.0.0.1:1", "cds"], 1, "cannot reach xDS server 127.0.0.1:1"),
        # A poller retries before it gives up, so on a slow machine the timeout may come first.
        (["fetch", "--server", "127.0.0.1:1", "--timeout", "5", "cds"], 1, "127.0.0.1:1"),
        (["dump", "--server", "127.0.0.1:1", "--timeout", "5"], 1, "cannot reach"),
        (["watch", "--server", "127.0.0.1:1", "nope"], 2, "unknown xDS resource type 'nope'"),
        (["watch", "--server", "127.0.0.1:1", "--count", "0", "cds"], 2, "must be at least 1"),
        (["watch", "--server", "127.0.0.1:1", "--timeout", "x", "cds"], 2, "not a number"),
        (["watch", "--api", "v2", "--server", "127.0.0.1:1", CLUSTER], 2, "API v3 type"),
        (["fetch", "--server", "http://127.0.0.1:1", "--transport", "grpc-fetch", "cds"], 2,
         "is a URL"),
        (["bogus"], 2, "invalid choice: 'bogus'"),
        ([], 2, "required: COMMAND"),
        (["watch", "--bootstrap", "/no/such/bootstrap.json", "cds"], 1, "/no/such/bootstrap.json"),
    ],
)  # fmt: skip
def test_errors_are_one_line(cli: Any, argv: list[str], code: int, text: str) -> None:
    result = cli(*argv)
    assert result.code == code
    line = _one_error_line(result)
    assert "error:" in line
    assert text in line
    assert result.out == ""


def test_version(cli: Any) -> None:
    result = cli("--version")
    assert result.code == 0
    assert result.out.startswith("xds-client ")


def test_fetch_rest_with_host_port(cli: Any, served: ControlPlane) -> None:
    rest_address = served.rest_url.removeprefix("http://")
    result = cli("fetch", "-s", rest_address, "--transport", "rest", "--json", "lds")
    assert result.code == 0, result.err
    assert [r["name"] for r in result.json_lines()] == ["ingress"]


def test_run_with_explicit_streams_gets_usage_errors_and_help() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert run(["watch", "--count", "0", "cds"], out, err) == 2
    assert "must be at least 1" in err.getvalue()
    assert run(["--help"], out, err) == 0
    assert "serve" in out.getvalue()
    assert "demo" in out.getvalue()


def test_dump_names_the_control_plane_that_answered(cli: Any) -> None:
    from envoy.config.core.v3.base_pb2 import ControlPlane as ControlPlaneId
    from envoy.config.listener.v3.listener_pb2 import Listener
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse

    from tests.client._scripted_server import ScriptedServer, ScriptedStream, response

    def reply(stream: ScriptedStream, request: DiscoveryRequest) -> DiscoveryResponse | None:
        if request.response_nonce:
            return None
        out = response(request, "1", Listener(name="l"))
        out.control_plane.CopyFrom(ControlPlaneId(identifier="cp-west-2"))
        return out

    with ScriptedServer(reply) as server:
        result = cli("dump", "-s", server.address, "lds")
    assert result.code == 0, result.err
    assert "control plane cp-west-2" in result.err.splitlines()
    assert ("LDS", "l", "1", "ACKED") in {tuple(line.split()) for line in result.out.splitlines()}
