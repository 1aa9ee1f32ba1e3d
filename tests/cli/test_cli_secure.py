"""The command line against a real control plane's setup: TLS, a bearer token, headers,
a bootstrap from the environment, and the ``-o`` output formats."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
import yaml

from xds_client.testing import ControlPlane

from .conftest import EXAMPLE_RESOURCES, Result

pytestmark = pytest.mark.timeout(60)

TOKEN = "s3cret-token-value"
SERVER_NAME = "xds.example.test"


class _RequireToken(grpc.ServerInterceptor):
    """Refuse every call without ``authorization: Bearer TOKEN`` and ``x-team: infra``."""

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: Any
    ) -> Any:
        metadata = dict(handler_call_details.invocation_metadata or ())
        if metadata.get("authorization") == f"Bearer {TOKEN}" and metadata.get("x-team") == "infra":
            return continuation(handler_call_details)

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

        return grpc.stream_stream_rpc_method_handler(deny)


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[ControlPlane, Path]]:
    """A TLS control plane (certificate for SERVER_NAME) that wants a token; the CA file."""
    ca = trustme.CA()
    cert = ca.issue_cert(SERVER_NAME)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    credentials = grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), b"".join(c.bytes() for c in cert.cert_chain_pems))]
    )
    with ControlPlane(
        server_credentials=credentials, interceptors=[_RequireToken()], rest_port=None
    ) as cp:
        cp.load_file(EXAMPLE_RESOURCES)
        yield cp, ca_file


def test_watch_over_tls_with_a_token_file(
    cli: Any, secured: tuple[ControlPlane, Path], tmp_path: Path
) -> None:
    cp, ca_file = secured
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    result: Result = cli(
        "watch", "-s", cp.address, "--ca-file", str(ca_file), "--server-name", SERVER_NAME,
        "--token-file", str(token_file), "-H", "x-team=infra", "--json", "--count", "1", "cds",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert [r["name"] for r in result.json_lines()] == ["backend"]
    assert TOKEN not in result.out + result.err


def test_dump_over_tls_with_a_token(cli: Any, secured: tuple[ControlPlane, Path]) -> None:
    cp, ca_file = secured
    result: Result = cli(
        "dump", "-s", cp.address, "--ca-file", str(ca_file), "--server-name", SERVER_NAME,
        "--token", TOKEN, "--header", "x-team=infra", "cds",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "ACKED" in result.out


def test_missing_token_is_a_one_line_failure(cli: Any, secured: tuple[ControlPlane, Path]) -> None:
    cp, ca_file = secured
    result: Result = cli(
        "watch", "-s", cp.address, "--ca-file", str(ca_file), "--server-name", SERVER_NAME,
        "--timeout", "20", "cds",
    )  # fmt: skip
    assert result.code == 1
    assert result.out == ""
    assert "UNAUTHENTICATED" in result.err.strip().splitlines()[-1]


def test_plaintext_against_tls_fails(cli: Any, secured: tuple[ControlPlane, Path]) -> None:
    cp, _ = secured
    result: Result = cli("dump", "-s", cp.address, "--token", TOKEN, "--timeout", "5", "cds")
    assert result.code == 1
    assert result.out == ""


def test_bootstrap_from_the_environment(
    cli: Any, served: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = {
        "xds_servers": [
            {
                "server_uri": served.address,
                "channel_creds": [{"type": "insecure"}],
                "server_features": ["xds_v3"],
            }
        ],
        "node": {"id": "from-env", "cluster": "c"},
    }
    monkeypatch.delenv("GRPC_XDS_BOOTSTRAP", raising=False)
    monkeypatch.setenv("GRPC_XDS_BOOTSTRAP_CONFIG", json.dumps(bootstrap))
    result: Result = cli("dump", "cds")
    assert result.code == 0, result.err
    assert "node from-env" in result.err
    assert "backend" in result.out


def test_fetch_yaml_is_the_resource_body(cli: Any, served: ControlPlane) -> None:
    result: Result = cli("fetch", "-s", served.address, "cds", "backend", "-o", "yaml")
    assert result.code == 0, result.err
    (cluster,) = yaml.safe_load_all(result.out)
    assert cluster["name"] == "backend"
    assert cluster["connect_timeout"] == "1s"


def test_output_name_and_wide(cli: Any, served: ControlPlane) -> None:
    names = cli("fetch", "-s", served.address, "cds", "-o", "name")
    assert names.code == 0, names.err
    assert names.out.splitlines() == ["cds/backend"]
    wide = cli("dump", "-s", served.address, "cds", "-o", "wide")
    assert wide.code == 0, wide.err
    assert wide.out.splitlines()[0].split()[-3:] == ["LAST", "UPDATED", "ERROR"]
    dump_names = cli("dump", "-s", served.address, "cds", "eds", "-o", "name")
    assert sorted(dump_names.out.splitlines()) == ["cds/backend", "eds/backend"]
