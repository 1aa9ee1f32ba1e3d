"""The ``store`` commands against a TLS ResourceStoreServer that wants a bearer token."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from xds_client.store import ResourceKey
from xds_client.testing import ResourceStoreServer

from .conftest import Result

pytestmark = pytest.mark.timeout(60)

TOKEN = "store-s3cret-token"
SERVER_NAME = "store.example.test"
KIND = "dashboard.grafana.app/dashboards"
KEY = ResourceKey("dashboard.grafana.app", "dashboards", "default", "a")


class _RequireToken(grpc.ServerInterceptor):
    """Refuse every call without ``authorization: Bearer TOKEN``."""

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: Any
    ) -> Any:
        metadata = dict(handler_call_details.invocation_metadata or ())
        if metadata.get("authorization") == f"Bearer {TOKEN}":
            return continuation(handler_call_details)

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

        return grpc.unary_unary_rpc_method_handler(deny)


@pytest.fixture
def secured_store(tmp_path: Path) -> Iterator[tuple[ResourceStoreServer, Path]]:
    ca = trustme.CA()
    cert = ca.issue_cert(SERVER_NAME)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    credentials = grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), b"".join(c.bytes() for c in cert.cert_chain_pems))]
    )
    with ResourceStoreServer(server_credentials=credentials, interceptors=[_RequireToken()]) as s:
        s.put(KEY, {"metadata": {"name": "a", "namespace": "default"}, "spec": {"title": "A"}})
        yield s, ca_file


def test_store_get_over_tls_with_a_token(
    cli: Any, secured_store: tuple[ResourceStoreServer, Path]
) -> None:
    server, ca_file = secured_store
    result: Result = cli(
        "store", "get", "-s", server.address, "--ca-file", str(ca_file),
        "--server-name", SERVER_NAME, "--token", TOKEN, KIND, "a", "-n", "default", "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    (record,) = result.json_lines()
    assert record["spec"] == {"title": "A"}
    assert TOKEN not in result.out + result.err


def test_store_get_without_the_token_is_refused(
    cli: Any, secured_store: tuple[ResourceStoreServer, Path]
) -> None:
    server, ca_file = secured_store
    result: Result = cli(
        "store", "get", "-s", server.address, "--ca-file", str(ca_file),
        "--server-name", SERVER_NAME, KIND, "a", "-n", "default",
    )  # fmt: skip
    assert result.code == 1
    assert result.out == ""
    assert "UNAUTHENTICATED" in result.err or "token" in result.err
