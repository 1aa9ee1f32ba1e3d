"""The command line at first contact (issue #35): every failure names its cause in CLI
words (a flag to try, not a Python argument), fast, on one line, with no gRPC log."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
import yaml
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from xds_client.testing import ControlPlane, ResourceStoreServer

from .conftest import EXAMPLE_RESOURCES, Result

pytestmark = pytest.mark.timeout(60)

SERVER_NAME = "xds.example.test"
KIND = "dashboard.grafana.app/dashboards"


def _refused() -> str:
    with socket.socket() as sock:  # bound, not listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _one_line(result: Result) -> str:
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    return lines[0]


@pytest.fixture(scope="module")
def tls() -> Iterator[tuple[ControlPlane, ControlPlane, Path]]:
    """A TLS control plane, an mTLS one, and a folder with ca.pem and other-ca.pem."""
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"xds-first-contact-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    other.cert_pem.write_to_path(str(folder / "other-ca.pem"))
    cert = ca.issue_cert(SERVER_NAME)
    pair = [(cert.private_key_pem.bytes(), b"".join(c.bytes() for c in cert.cert_chain_pems))]
    plain = grpc.ssl_server_credentials(pair)
    mutual = grpc.ssl_server_credentials(
        pair, root_certificates=ca.cert_pem.bytes(), require_client_auth=True
    )
    with (
        ControlPlane(server_credentials=plain, rest_port=None) as cp,
        ControlPlane(server_credentials=mutual, rest_port=None) as mcp,
    ):
        cp.load_file(EXAMPLE_RESOURCES)
        yield cp, mcp, folder


@pytest.mark.parametrize(
    ("flags", "hint"),
    [
        ([], "add --tls (the system's CAs) or --ca-file PEM"),
        (["--tls"], "--ca-file PEM"),
        (["--ca-file", "{folder}/other-ca.pem", "--server-name", SERVER_NAME], "--ca-file PEM"),
        (["--ca-file", "{folder}/ca.pem"], "--server-name NAME"),
    ],
    ids=["plaintext", "system-roots", "other-ca", "wrong-name"],
)
def test_tls_mistakes_give_the_flag_to_try(
    cli: Any, tls: tuple[ControlPlane, ControlPlane, Path], flags: list[str], hint: str
) -> None:
    cp, _, folder = tls
    args = [f.format(folder=folder) for f in flags]
    for command in (["watch", "--timeout", "10", "cds"], ["graph", "--timeout", "10", "ingress"]):
        result = cli(command[0], "-s", cp.address, *args, *command[1:])
        assert result.code == 1
        line = _one_line(result)
        assert hint in line, line
        assert "Socket closed" not in line
        assert "WRONG_VERSION_NUMBER" not in line


def test_mtls_without_a_client_certificate_says_cert_and_key(
    cli: Any, tls: tuple[ControlPlane, ControlPlane, Path]
) -> None:
    _, mcp, folder = tls
    result = cli("watch", "-s", mcp.address, "--ca-file", str(folder / "ca.pem"),
                 "--server-name", SERVER_NAME, "--timeout", "10", "cds")  # fmt: skip
    assert result.code == 1
    assert "--cert PEM --key PEM" in _one_line(result)


def test_tls_to_a_plaintext_server_says_it_does_not_speak_tls(
    cli: Any, served: ControlPlane
) -> None:
    result = cli("watch", "-s", served.address, "--tls", "--timeout", "10", "cds")
    assert result.code == 1
    assert "does not speak TLS" in _one_line(result)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    return subprocess.run(
        [sys.executable, "-m", "xds_client", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_no_c_core_log_line_reaches_the_user(tmp_path: Path, served: ControlPlane) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    result = _run("watch", "-s", served.address, "--ca-file", str(bad), "--timeout", "5", "cds")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"xds-client: error: --ca-file {bad} is not a PEM file with a certificate"
    ]
    port = served.address.rsplit(":", 1)[1]
    result = _run("serve", "--resources", str(EXAMPLE_RESOURCES), "--port", port)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()  # not gRPC's "E1207 ... add_port.cc" line
    assert "in use" in line
    assert "GRPC_VERBOSITY" not in line


def test_graph_fails_fast_with_the_cause(cli: Any) -> None:
    started = time.monotonic()
    result = cli("graph", "-s", _refused(), "ingress")  # default --timeout 20
    assert time.monotonic() - started < 10
    assert result.code == 1
    assert "connection refused" in _one_line(result)
    with ResourceStoreServer(":memory:") as store:
        result = cli("graph", "-s", store.address, "ingress")
    assert "is not an xDS server" in _one_line(result)


@pytest.mark.parametrize("delta", [[], ["--delta"]], ids=["sotw", "delta"])
def test_graph_of_a_missing_listener_fails_at_once(
    cli: Any, served: ControlPlane, delta: list[str]
) -> None:
    started = time.monotonic()
    result = cli("graph", "-s", served.address, *delta, "no-such-listener")  # --timeout 20
    assert time.monotonic() - started < 10
    assert result.code == 1
    assert "listener 'no-such-listener' does not exist" in _one_line(result)


def test_errors_speak_in_flags(cli: Any, served: ControlPlane) -> None:
    result = cli("watch", "-s", served.address, "vhds", "x")
    assert result.code == 2
    line = _one_line(result)
    assert "use --delta" in line
    assert "protocol=" not in line
    result = cli("watch", "-s", served.address, "clusters")
    line = _one_line(result)
    assert "register()" not in line
    assert "did you mean 'cds'" in line


def test_fetch_from_a_server_that_is_not_xds(cli: Any) -> None:
    with ResourceStoreServer(":memory:") as store:
        result = cli("fetch", "-s", store.address, "cds")
    assert result.code == 1
    line = _one_line(result)
    assert "not an xDS server" in line
    assert "transport=" not in line


def test_fetch_rest_from_a_grpc_port_prints_no_raw_bytes(cli: Any, served: ControlPlane) -> None:
    result = cli("fetch", "-s", served.address, "--transport", "rest", "cds")
    assert result.code == 1
    line = _one_line(result)
    assert line.isprintable()
    assert "--transport grpc-fetch" in line


def test_store_health_tells_unreachable_from_unhealthy(cli: Any, served: ControlPlane) -> None:
    result = cli("store", "health", "-s", _refused())
    assert result.code == 1
    assert "cannot reach ResourceStore" in _one_line(result)
    assert "NOT SERVING" not in result.out
    result = cli("store", "health", "-s", served.address)
    assert result.code == 1
    assert "is not a ResourceStore server" in _one_line(result)
    result = cli("store", "list", "-s", served.address, KIND)
    assert "is not a ResourceStore server" in _one_line(result)


def test_store_get_defaults_the_namespace_to_default(cli: Any) -> None:
    with ResourceStoreServer(":memory:") as store:
        created = cli("store", "create", "-s", store.address, KIND, "cpu", "-d", "{}")
        assert created.code == 0, created.err
        assert "/default/cpu" in created.out
        got = cli("store", "get", "-s", store.address, KIND, "cpu", "-o", "name")
        assert got.code == 0, got.err
        assert got.out.strip().endswith("/default/cpu")


def test_fetch_of_what_exists_exits_0_and_of_a_missing_name_1(
    cli: Any, served: ControlPlane
) -> None:
    assert cli("fetch", "-s", served.address, "cds", "backend").code == 0
    result = cli("fetch", "-s", served.address, "cds", "nothere", "-o", "name")
    assert result.code == 1


def test_dump_prints_what_answered_and_silent_types_as_requested(cli: Any) -> None:
    with ControlPlane() as cp:
        cp.set_resources("cds", [Cluster(name="a")])  # nothing else: LDS, RDS, EDS stay silent
        result = cli("dump", "-s", cp.address, "--timeout", "1.5")
    assert result.code == 0, result.err
    rows = [line.split() for line in result.out.splitlines()[1:]]
    assert ["CDS", "a", "1", "ACKED"] in rows
    assert {tuple(r) for r in rows if r[-1] == "REQUESTED"} == {
        ("EDS", "*", "REQUESTED"), ("LDS", "*", "REQUESTED"), ("RDS", "*", "REQUESTED")
    }  # fmt: skip
    assert "LDS: no answer from" in result.err


def test_dump_with_no_answer_at_all_fails(cli: Any) -> None:
    with ControlPlane() as cp:
        cp.delay_responses(30)
        result = cli("dump", "-s", cp.address, "--timeout", "1", "cds")
    assert result.code == 1
    assert "no xDS response" in _one_line(result)


def test_graph_honours_every_output_format(cli: Any, served: ControlPlane) -> None:
    base = ("graph", "-s", served.address, "ingress")
    names = cli(*base, "-o", "name")
    assert names.out.split() == ["cds/backend", "eds/backend", "lds/ingress", "rds/local-routes"]
    as_yaml = yaml.safe_load(cli(*base, "-o", "yaml").out)
    assert as_yaml["listener"] == "ingress"
    wide = cli(*base, "-o", "wide").out
    assert wide.startswith("listener ingress")
    assert "KIND" in wide
    assert "RDS   local-routes  1" in wide
    assert cli(*base).out != wide


def test_store_outputs_as_kubectl(cli: Any) -> None:
    with ResourceStoreServer(":memory:") as store:
        s = store.address
        assert cli("store", "create", "-s", s, KIND, "cpu", "-d", '{"spec": {"a": 1}}').code == 0
        got = json.loads(cli("store", "get", "-s", s, KIND, "cpu", "-o", "json").out)
        assert got["spec"] == {"a": 1}  # the object, not an event envelope
        assert got["metadata"]["name"] == "cpu"
        names = cli("store", "watch", "-s", s, KIND, "--initial", "--count", "2", "-o", "name")
        assert names.out.splitlines() == [f"{KIND}/default/cpu"]  # no "/" for the bookmark
        wide = cli("store", "list", "-s", s, KIND, "-o", "wide").out.splitlines()
        assert wide[0].split() == ["NAMESPACE", "NAME", "VERSION", "UID", "BYTES", "LABELS"]
        text = cli("store", "watch", "-s", s, KIND, "--initial", "--count", "1").out
        wide_line = cli("store", "watch", "-s", s, KIND, "--initial", "--count", "1",
                        "-o", "wide").out  # fmt: skip
        assert "json-bytes" in wide_line
        assert "json-bytes" not in text
        plain = cli("store", "list", "-s", s, KIND, "--no-headers").out.splitlines()
        assert plain[0].split()[:2] == ["default", "cpu"]


def test_watch_takes_several_types_and_refuses_a_type_as_a_name(
    cli: Any, served: ControlPlane
) -> None:
    result = cli("watch", "-s", served.address, "cds", "eds")
    assert result.code == 2
    assert "cds,eds" in _one_line(result)
    result = cli("watch", "-s", served.address, "--json", "--count", "2", "cds,eds")
    assert result.code == 0, result.err
    assert sorted(r["type_url"].rsplit(".", 1)[1] for r in result.json_lines()) == [
        "Cluster", "ClusterLoadAssignment"
    ]  # fmt: skip
    assert result.err.count("connected") == 1  # one note for the one ADS stream


def test_the_server_may_come_from_the_environment(
    cli: Any, served: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDS_CLIENT_SERVER", served.address)
    result = cli("fetch", "cds", "--no-headers")
    assert result.code == 0, result.err
    assert result.out.split() == ["CDS", "backend", "1"]


COMMANDS = [["serve"], ["watch"], ["fetch"], ["dump"], ["graph"], ["demo"], ["completion"],
            ["load"],
            ["store", "get"], ["store", "list"], ["store", "watch"], ["store", "create"],
            ["store", "update"], ["store", "delete"], ["store", "health"]]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_help_ends_with_examples(cli: Any, command: list[str]) -> None:
    result = cli(*command, "--help")
    assert result.code == 0
    examples = result.out.split("examples:\n", 1)[1]
    assert f"xds-client {' '.join(command)}" in examples


def test_help_shows_defaults(cli: Any) -> None:
    text = " ".join(cli("fetch", "--help").out.split())
    assert "give up after S seconds (default: 10.0)" in text
    assert "(default: v3)" in text
    assert "(default: False)" not in text  # a flag's default says nothing


def test_a_mistyped_option_gets_a_suggestion(cli: Any) -> None:
    result = cli("watch", "-s", "127.0.0.1:1", "--tiemout", "3", "cds")
    assert result.code == 2
    assert "(did you mean --timeout?)" in _one_line(result)


def test_completion_scripts_complete_commands_options_and_types() -> None:
    script = _run("completion", "bash").stdout
    assert _run("completion", "zsh").stdout.startswith("autoload -U +X bashcompinit")

    def complete(*words: str) -> list[str]:
        probe = (
            f"{script}\nCOMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; "
            '_xds_client; echo "${COMPREPLY[@]}"'
        )
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
        return done.stdout.split()

    assert complete("xds-client", "wa") == ["watch"]
    assert complete("xds-client", "watch", "--tim") == ["--timeout"]
    assert complete("xds-client", "watch", "cd") == ["cds"]
    assert complete("xds-client", "store", "he") == ["health"]
    assert complete("xds-client", "store", "get", "--names") == ["--namespace"]


def test_a_mistyped_field_in_a_resource_file_gets_a_suggestion(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(
        "resources:\n"
        '- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster\n'
        "  name: backend\n"
        "  conect_timeout: 1s\n"
    )
    result = cli("serve", "--resources", str(path))
    assert result.code == 2
    line = _one_line(result)
    assert "has no field 'conect_timeout'; did you mean 'connect_timeout'?" in line
    assert "transportSocketMatches" not in line  # not the list of every field


def test_verbose_shows_requests_and_responses_redacted(cli: Any, served: ControlPlane) -> None:
    from envoy.extensions.transport_sockets.tls.v3.common_pb2 import TlsCertificate
    from envoy.extensions.transport_sockets.tls.v3.secret_pb2 import Secret

    key = "-----BEGIN PRIVATE KEY-----secret-----END PRIVATE KEY-----"
    secret = Secret(name="tls")
    secret.tls_certificate.CopyFrom(TlsCertificate())
    secret.tls_certificate.private_key.inline_string = key
    served.set_resources("sds", [secret])
    result = cli("watch", "-s", served.address, "-vv", "--count", "1", "sds", "tls")
    assert result.code == 0, result.err
    assert "> DiscoveryRequest  SDS" in result.err
    assert "< " in result.err
    assert "< DiscoveryResponse  SDS" in result.err  # decoded, so it could be redacted
    assert "[redacted]" in result.err
    assert key not in result.out + result.err
    assert base64.b64encode(key.encode()).decode()[:20] not in result.err
    quiet = cli("watch", "-s", served.address, "--count", "1", "cds")
    assert "DiscoveryRequest" not in quiet.err


def _bootstrap_file(folder: Path, *servers: ControlPlane) -> str:
    path = folder / "bootstrap.json"
    xds_servers = [
        {"server_uri": cp.address, "channel_creds": [{"type": "insecure"}]} for cp in servers
    ]
    path.write_text(json.dumps({"xds_servers": xds_servers, "node": {"id": "n1"}}))
    return str(path)


@pytest.mark.parametrize("how", ["grpc-fetch", "rest"])
def test_verbose_fetch_shows_each_poll(cli: Any, served: ControlPlane, how: str) -> None:
    server = served.rest_url if how == "rest" else served.address
    result = cli("fetch", "-s", server, "-v", "cds", "backend")
    assert result.code == 0, result.err
    assert "> DiscoveryRequest  CDS" in result.err
    assert "< DiscoveryResponse  CDS  version_info=1" in result.err
    assert "-v shows" not in result.err
    quiet = cli("fetch", "-s", server, "cds", "backend")
    assert "DiscoveryRequest" not in quiet.err


@pytest.mark.parametrize("command", ["watch", "fetch"])
def test_verbose_works_with_a_bootstrap(
    cli: Any, served: ControlPlane, tmp_path: Path, command: str
) -> None:
    args = ["--count", "1"] if command == "watch" else []
    bootstrap = _bootstrap_file(tmp_path, served)
    result = cli(command, "--bootstrap", bootstrap, "-v", *args, "cds", "backend")
    assert result.code == 0, result.err
    assert "> DiscoveryRequest  CDS" in result.err
    assert "< DiscoveryResponse  CDS" in result.err
    assert "--server" not in result.err


def test_verbose_with_a_bootstrap_of_two_servers(
    cli: Any, served: ControlPlane, tmp_path: Path
) -> None:
    # -v keeps the bootstrap's servers (here a fallback that refuses) as they are.
    bootstrap = tmp_path / "bootstrap.json"
    xds_servers = [
        {"server_uri": address, "channel_creds": [{"type": "insecure"}]}
        for address in (served.address, _refused())
    ]
    bootstrap.write_text(json.dumps({"xds_servers": xds_servers}))
    result = cli("watch", "--bootstrap", str(bootstrap), "-v", "--count", "1", "cds", "backend")
    assert result.code == 0, result.err
    assert "< DiscoveryResponse  CDS" in result.err


def test_log_level_shows_the_library_lines(cli: Any, served: ControlPlane) -> None:
    quiet = cli("watch", "-s", served.address, "--count", "1", "cds")
    loud = cli("watch", "-s", served.address, "--count", "1", "--log-level", "debug", "cds")
    assert loud.code == 0, loud.err
    assert "DEBUG xds_client" in loud.err
    assert "DEBUG xds_client" not in quiet.err
