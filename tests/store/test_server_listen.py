"""ResourceStoreServer's listening options: a fixed port (a busy one is refused) and TLS."""

from __future__ import annotations

import grpc
import pytest
import trustme

from xds_client.errors import TransportError
from xds_client.store import ResourceKey, ResourceStoreClient
from xds_client.testing import ResourceStoreServer

pytestmark = pytest.mark.timeout(30)

KEY = ResourceKey("dashboard.grafana.app", "dashboards", "default", "a")


def test_a_busy_port_is_refused() -> None:
    with ResourceStoreServer() as first:
        port = int(first.address.rsplit(":", 1)[1])
        second = ResourceStoreServer(port=port)
        with pytest.raises(TransportError, match=f"cannot bind 127.0.0.1:{port}"):
            second.start()
        second.stop()


def test_serves_tls_with_server_credentials() -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("store.example.test")
    credentials = grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), b"".join(c.bytes() for c in cert.cert_chain_pems))]
    )
    with ResourceStoreServer(server_credentials=credentials) as server:
        server.put(KEY, {"metadata": {"name": "a", "namespace": "default"}})
        channel_credentials = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
        with ResourceStoreClient(
            server.address,
            credentials=channel_credentials,
            options=[("grpc.ssl_target_name_override", "store.example.test")],
        ) as client:
            assert client.read(KEY).key.name == "a"
