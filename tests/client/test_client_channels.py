"""Channels (TLS, mTLS, tokens, message size) and asyncio-specific behaviour."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse

from xds_client import (
    AsyncXdsClient,
    ChannelCredentialsConfig,
    ConnectivityChanged,
    Node,
    ResourceUpdated,
    ServerTarget,
    XdsClient,
)
from xds_client.resources import CLUSTER
from xds_client.testing import ControlPlane

from .conftest import FAST_BACKOFF

pytestmark = pytest.mark.timeout(60)


class TinyAds:
    """A one-method ADS server that answers every request with cluster "a".

    It records the metadata and peer certificate of each stream, which the
    in-process ControlPlane does not expose over TLS.
    """

    def __init__(self, credentials: grpc.ServerCredentials | None) -> None:
        self.metadata: list[dict[str, str]] = []
        self.peer_identities: list[Any] = []
        self.requests: list[DiscoveryRequest] = []
        self._arrived = threading.Condition()
        self._executor = ThreadPoolExecutor(4)
        self.server = grpc.server(self._executor)
        handler = grpc.method_handlers_generic_handler(
            "envoy.service.discovery.v3.AggregatedDiscoveryService",
            {
                "StreamAggregatedResources": grpc.stream_stream_rpc_method_handler(
                    self._serve,
                    request_deserializer=DiscoveryRequest.FromString,
                    response_serializer=DiscoveryResponse.SerializeToString,
                )
            },
        )
        self.server.add_generic_rpc_handlers((handler,))
        if credentials is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = self.server.add_secure_port("127.0.0.1:0", credentials)
        self.server.start()

    def _serve(
        self, requests: Iterator[DiscoveryRequest], context: grpc.ServicerContext
    ) -> Iterator[DiscoveryResponse]:
        self.metadata.append({k: str(v) for k, v in context.invocation_metadata()})
        self.peer_identities.append(context.peer_identities())
        for n, request in enumerate(requests):
            with self._arrived:
                self.requests.append(request)
                self._arrived.notify_all()
            if request.response_nonce:
                continue  # an ACK
            response = DiscoveryResponse(version_info="1", type_url=CLUSTER, nonce=str(n))
            response.resources.add().Pack(Cluster(name="a"))
            yield response

    def wait_for_requests(self, count: int, timeout: float) -> list[DiscoveryRequest]:
        """The requests once at least ``count`` arrived; fails after ``timeout`` seconds."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"{len(self.requests)} of {count} requests in {timeout}s")
            return list(self.requests)

    def close(self) -> None:
        self.server.stop(0).wait(5)
        self._executor.shutdown(wait=True)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_tls_with_ca_file_and_bearer_token(ca: trustme.CA, tmp_path: Path) -> None:
    cert = ca.issue_cert("localhost")
    server_creds = grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), cert.cert_chain_pems[0].bytes())]
    )
    server = TinyAds(server_creds)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    try:
        creds = ChannelCredentialsConfig(ca_certificate=str(ca_file))
        with (
            XdsClient(
                f"localhost:{server.port}",
                credentials=creds,
                bearer_token="tok-123",
                metadata={"x-tenant": "blue"},
                backoff=FAST_BACKOFF,
            ) as client,
            client.watch(Cluster, "a"),
        ):
            assert client.wait_for(Cluster, "a", timeout=10).name == "a"
        assert server.metadata[0]["authorization"] == "Bearer tok-123"
        assert server.metadata[0]["x-tenant"] == "blue"
    finally:
        server.close()


def test_mtls_with_inline_pem_and_call_credentials(ca: trustme.CA) -> None:
    server_cert = ca.issue_cert("xds.test")
    client_cert = ca.issue_cert("client.test")
    server_creds = grpc.ssl_server_credentials(
        [(server_cert.private_key_pem.bytes(), server_cert.cert_chain_pems[0].bytes())],
        root_certificates=ca.cert_pem.bytes(),
        require_client_auth=True,
    )
    server = TinyAds(server_creds)

    class Token(grpc.AuthMetadataPlugin):
        def __call__(
            self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback
        ) -> None:
            callback((("authorization", "Bearer from-plugin"),), None)

    try:
        creds = ChannelCredentialsConfig(
            ca_certificate=ca.cert_pem.bytes(),
            certificate_chain=client_cert.cert_chain_pems[0].bytes(),
            private_key=client_cert.private_key_pem.bytes(),
            server_name_override="xds.test",
        )
        target = ServerTarget(
            f"127.0.0.1:{server.port}",
            credentials=creds,
            call_credentials=grpc.metadata_call_credentials(Token()),
        )
        with XdsClient(target, backoff=FAST_BACKOFF) as client, client.watch(Cluster, "a"):
            assert client.wait_for(Cluster, "a", timeout=10).name == "a"
        assert server.metadata[0]["authorization"] == "Bearer from-plugin"
        assert any(b"client.test" in identity for identity in server.peer_identities[0])
    finally:
        server.close()


def test_tls_with_untrusted_server_reports_connectivity(ca: trustme.CA) -> None:
    other_ca = trustme.CA()
    cert = other_ca.issue_cert("localhost")
    server = TinyAds(
        grpc.ssl_server_credentials(
            [(cert.private_key_pem.bytes(), cert.cert_chain_pems[0].bytes())]
        )
    )
    try:
        creds = ChannelCredentialsConfig(ca_certificate=ca.cert_pem.bytes())
        with (
            XdsClient(
                f"localhost:{server.port}", credentials=creds, backoff=FAST_BACKOFF
            ) as client,
            client.watch(Cluster, "a") as watch,
        ):
            event = watch.get(10)
            assert isinstance(event, ConnectivityChanged)
            assert not event.connected
            assert event.reason is not None
            assert "UNAVAILABLE" in event.reason
    finally:
        server.close()


def test_node_in_every_request() -> None:
    server = TinyAds(None)
    try:
        with XdsClient(
            f"127.0.0.1:{server.port}", node=Node(id="every"), node_in_every_request=True,
            backoff=FAST_BACKOFF,
        ) as client, client.watch(Cluster, "a"):  # fmt: skip
            client.wait_for(Cluster, "a", timeout=10)
            requests = server.wait_for_requests(2, timeout=10)  # the subscription and its ACK
    finally:
        server.close()
    assert requests[1].response_nonce, "the second request is the ACK"
    assert [r.node.id for r in requests] == ["every"] * len(requests)


# ---------------------------------------------------------------------------- asyncio


def test_async_iteration_and_coroutine_callbacks() -> None:
    async def main(address: str, cp: ControlPlane) -> list[str]:
        seen: list[str] = []
        got_one = asyncio.Event()

        async def on_event(event: Any) -> None:
            if isinstance(event, ResourceUpdated):
                await asyncio.sleep(0)
                seen.append(event.version)
                got_one.set()

        async with AsyncXdsClient(address, backoff=FAST_BACKOFF, protocol="delta") as client:
            client.watch(Cluster, "a", on_event=on_event)
            async with client.watch(Cluster, ["a"]) as watch:
                async for event in watch:
                    if isinstance(event, ResourceUpdated):
                        assert event.resource.name == "a"
                        break
            await asyncio.wait_for(got_one.wait(), 5)
            mark = cp.mark()
            cp.update(Cluster, [Cluster(name="a", alt_stat_name="2")], version="2")
            await cp.wait_for_ack_async(Cluster, since=mark)
            await client.wait_for(Cluster, "a", predicate=lambda c: c.alt_stat_name == "2")
            assert client.config_dump().generic_xds_configs[0].name == "a"
        return seen

    with ControlPlane(rest_port=None, heartbeat_interval=None) as cp:
        cp.set_resources(Cluster, [Cluster(name="a")], version="1")
        seen = asyncio.run(main(cp.address, cp))
    assert len(seen) == 2


def test_async_iteration_ends_when_the_client_closes() -> None:
    async def main(address: str) -> int:
        client = AsyncXdsClient(address, backoff=FAST_BACKOFF)
        count = 0
        async with client:
            watch = client.watch(Cluster, "a")

            async def consume() -> None:
                nonlocal count
                async for _ in watch:
                    count += 1

            task = asyncio.create_task(consume())
            await asyncio.sleep(0.3)
        await asyncio.wait_for(task, 2)  # the iterator ended with the client
        return count

    with ControlPlane(rest_port=None, heartbeat_interval=None) as cp:
        cp.set_resources(Cluster, [Cluster(name="a")], version="1")
        assert asyncio.run(main(cp.address)) >= 1


def test_async_client_needs_a_running_loop() -> None:
    from xds_client.errors import UsageError

    client = AsyncXdsClient("127.0.0.1:1")
    with pytest.raises(UsageError, match="running event loop"):
        client.watch(Cluster, "a")


def test_sync_client_inside_a_running_event_loop() -> None:
    # What a notebook cell does: plain blocking calls while a loop runs.
    async def cell(address: str) -> str:
        with XdsClient(address, backoff=FAST_BACKOFF) as client, client.watch(Cluster, "a"):
            return client.wait_for(Cluster, "a", timeout=5).name

    with ControlPlane(rest_port=None, heartbeat_interval=None) as cp:
        cp.set_resources(Cluster, [Cluster(name="a")], version="1")
        assert asyncio.run(cell(cp.address)) == "a"
    assert not [t for t in threading.enumerate() if t.name.startswith("xds-client")]
