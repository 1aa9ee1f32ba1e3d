# Generated from tests/transport/test_async_rest_transport.py by tools/gen_sync.py: do not edit.
"""RestTransport against a local stub server (generated from test_async_rest_transport.py)."""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Iterator

import pytest
import trustme
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
from google.rpc.status_pb2 import Status
from tenacity import wait_fixed

from xds_client._backends.threads import call_blocking
from xds_client.errors import TransportError, UsageError
from xds_client.resources import (
    CLUSTER,
    ENDPOINT,
    V2_CLUSTER,
    V2_LISTENER,
    VIRTUAL_HOST,
    decode,
    resource_type,
)
from xds_client.transport import ChannelCredentialsConfig, ServerTarget, Stream, StreamSpec
from xds_client.transport._polling import PollError
from xds_client.transport._rest import RestTransport

from ._poll_stubs import FAST, NODE, SPEC, StubRestServer, cluster, pack, tls_server_context
from ._stream_checks import close_while_receiving

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def server() -> Iterator[StubRestServer]:
    s = StubRestServer()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def first(type_url: str = CLUSTER, names: tuple[str, ...] = ()) -> DiscoveryRequest:
    return DiscoveryRequest(type_url=type_url, node=NODE, resource_names=list(names))


def names_of(response: DiscoveryResponse | None) -> list[str]:
    assert response is not None
    return [getattr(decode(a), "name", "") for a in response.resources]


def test_polls_200_then_304_then_update(server: StubRestServer) -> None:
    server.set(CLUSTER, "1", {"a": pack(cluster("a"))})
    transport = RestTransport(server.url, policy=FAST)
    stream = transport.open(SPEC)
    assert isinstance(stream, Stream)
    try:
        stream.send(first())
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "1"
        assert names_of(response) == ["a"]
        stream.send(DiscoveryRequest(type_url=CLUSTER, version_info="1"))  # the ACK
        assert stream.recv(0.3) is None  # several polls, all 304
        seen = call_blocking(server.wait_requests, 3)
        assert seen[0].path == "/v3/discovery:clusters"
        assert seen[0].request.node.cluster == "c1"
        assert seen[-1].request.version_info == "1"
        assert seen[-1].request.node.cluster == "c1"  # the node goes in every poll
        server.set(CLUSTER, "2", {"a": pack(cluster("a")), "b": pack(cluster("b"))})
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "2"
        assert names_of(response) == ["a", "b"]
    finally:
        transport.close()


def test_nack_is_carried_with_details_list(server: StubRestServer) -> None:
    server.set(CLUSTER, "1", {"a": pack(cluster("a"))})
    with_transport = RestTransport(server.url, policy=FAST)
    stream = with_transport.open(SPEC)
    try:
        stream.send(first())
        assert stream.recv(5) is not None
        nack = DiscoveryRequest(
            type_url=CLUSTER, error_detail=Status(code=3, message="bad cluster a")
        )
        stream.send(nack)
        assert stream.recv(0.2) is None  # the same rejected version is not handed out again
        last = server.requests[-1]
        assert last.request.error_detail.message == "bad cluster a"
        assert b'"details":[]' in last.raw
    finally:
        with_transport.close()


def test_new_names_are_fetched_at_once_despite_current_version(
    server: StubRestServer,
) -> None:
    server.set(ENDPOINT, "1", {"a": pack(cluster("a")), "b": pack(cluster("b"))})
    transport = RestTransport(server.url, policy=FAST.with_interval(60))
    stream = transport.open(StreamSpec("", False, (ENDPOINT,)))
    try:
        stream.send(first(ENDPOINT, ("a",)))
        assert names_of(stream.recv(5)) == ["a"]
        stream.send(DiscoveryRequest(type_url=ENDPOINT, version_info="1", resource_names=["a"]))
        stream.send(
            DiscoveryRequest(type_url=ENDPOINT, version_info="1", resource_names=["a", "b"])
        )
        assert names_of(stream.recv(5)) == ["a", "b"]
    finally:
        transport.close()


def test_404_is_no_resources(server: StubRestServer, caplog: pytest.LogCaptureFixture) -> None:
    server.set(ENDPOINT, "1", {"a": pack(cluster("a"))})
    transport = RestTransport(server.url, policy=FAST)
    stream = transport.open(SPEC)
    try:
        with caplog.at_level(logging.WARNING, "xds_client.transport.rest"):
            stream.send(first(ENDPOINT, ("zzz",)))
            assert stream.recv(0.2) is None
        assert sum("404" in r.getMessage() for r in caplog.records) == 1  # warned once
    finally:
        transport.close()


def test_v2_paths_and_camel_case_answers() -> None:
    server = StubRestServer(camel_case=True)
    transport = RestTransport(server.url, policy=FAST)
    try:
        server.set(V2_LISTENER, "9", {})
        v2_cluster = resource_type(V2_CLUSTER).message_class(name="a")
        server.set(V2_CLUSTER, "3", {"a": pack(v2_cluster)})
        stream = transport.open(StreamSpec("", False, (V2_CLUSTER,)))
        stream.send(first(V2_CLUSTER))
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "3"
        assert response.resources[0].type_url == V2_CLUSTER
        assert server.requests[0].path == "/v2/discovery:clusters"
    finally:
        transport.close()
        server.close()


def test_headers_are_sent_and_never_logged(
    server: StubRestServer, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Bearer s3cr3t-t0ken"
    target = ServerTarget(server.url, call_metadata=(("authorization", secret),))
    assert secret not in repr(target)
    transport = RestTransport(target, policy=FAST)
    stream = transport.open(SPEC)
    try:
        with caplog.at_level(logging.DEBUG):
            server.set(CLUSTER, "1", {})
            stream.send(first())
            assert stream.recv(5) is not None
            server.fail(503, count=1)
            server.set(CLUSTER, "2", {})
            assert stream.recv(5) is not None
        assert server.requests[-1].headers["authorization"] == secret
        assert caplog.records  # the retry was logged ...
        assert all(secret not in r.getMessage() for r in caplog.records)  # ... without it
        assert secret not in transport.describe()
    finally:
        transport.close()


def test_5xx_backs_off_and_recovers(server: StubRestServer) -> None:
    server.set(CLUSTER, "1", {})
    transport = RestTransport(server.url, policy=FAST)
    stream = transport.open(SPEC)
    try:
        stream.send(first())
        assert stream.recv(5) is not None
        server.fail(500, count=2, body="database down")
        server.set(CLUSTER, "2", {})
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "2"
        assert len(server.requests) == 4
    finally:
        transport.close()


def test_persistent_5xx_fails_the_stream_with_the_status(server: StubRestServer) -> None:
    server.set(CLUSTER, "1", {})
    transport = RestTransport(server.url, policy=FAST)
    stream = transport.open(SPEC)
    try:
        stream.send(first())
        assert stream.recv(5) is not None
        server.fail(503, count=10, body="overloaded")
        with pytest.raises(TransportError, match=r"503.*overloaded") as info:
            stream.recv(5)
        assert isinstance(info.value, PollError)
        assert info.value.status == 503
        assert len(server.requests) == 1 + 3  # failures_before_error
    finally:
        transport.close()


def test_5xx_before_any_success_fails_at_once(server: StubRestServer) -> None:
    server.fail(503, count=10, body="starting")
    transport = RestTransport(server.url, policy=FAST)
    stream = transport.open(SPEC)
    try:
        stream.send(first())
        with pytest.raises(TransportError, match="503"):
            stream.recv(5)
        assert len(server.requests) == 1  # the client backs off and may fall back
    finally:
        transport.close()


def test_4xx_fails_at_once(server: StubRestServer) -> None:
    server.fail(422, count=10, body='{"detail":"node.cluster required"}')
    transport = RestTransport(server.url, policy=FAST)
    stream = transport.open(SPEC)
    try:
        stream.send(first())
        with pytest.raises(TransportError, match="422"):
            stream.recv(5)
        assert len(server.requests) == 1
    finally:
        transport.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_refused_backs_off_then_fails() -> None:
    transport = RestTransport(f"http://127.0.0.1:{free_port()}", policy=FAST)
    stream = transport.open(SPEC)
    try:
        stream.send(first())
        with pytest.raises(TransportError, match="connection refused") as info:
            stream.recv(5)
        assert isinstance(info.value.__cause__, ConnectionRefusedError)
    finally:
        transport.close()


def test_request_timeout(server: StubRestServer) -> None:
    server.delay = 2.0
    policy = FAST.with_request_timeout(0.1).with_backoff(wait_fixed(0.01), 1)
    transport = RestTransport(server.url, policy=policy)
    stream = transport.open(SPEC)
    try:
        stream.send(first())
        start = time.monotonic()
        with pytest.raises(TransportError, match=r"timed out after 0\.1s"):
            stream.recv(5)
        assert time.monotonic() - start < 1.5
    finally:
        transport.close()


def test_close_aborts_a_poll_in_flight(server: StubRestServer) -> None:
    server.delay = 5.0
    transport = RestTransport(server.url, policy=FAST.with_request_timeout(10))
    stream = transport.open(SPEC)
    stream.send(first())
    assert close_while_receiving(stream, transport.close, lambda: server.wait_requests(1)) < 2


def test_usage_errors(server: StubRestServer) -> None:
    with pytest.raises(UsageError, match="base URL"):
        RestTransport("127.0.0.1:80")
    with pytest.raises(UsageError, match="https"):
        RestTransport(ServerTarget(server.url, credentials=ChannelCredentialsConfig()))
    transport = RestTransport(server.url, policy=FAST)
    with pytest.raises(UsageError, match="SotW only"):
        transport.open(StreamSpec("", True, (CLUSTER,)))
    with pytest.raises(UsageError, match="no REST endpoint"):
        transport.open(StreamSpec("", False, (VIRTUAL_HOST,)))
    transport.close()
    with pytest.raises(TransportError, match="closed"):
        transport.open(SPEC)


# -- TLS -----------------------------------------------------------------------------


def test_https_with_a_test_ca(ca: trustme.CA) -> None:
    server = StubRestServer(ssl_context=tls_server_context(ca))
    creds = ChannelCredentialsConfig(ca_certificate=ca.cert_pem.bytes())
    transport = RestTransport(ServerTarget(server.url, credentials=creds), policy=FAST)
    try:
        server.set(CLUSTER, "1", {})
        stream = transport.open(SPEC)
        stream.send(first())
        assert stream.recv(5) is not None
    finally:
        transport.close()
        server.close()


def test_https_rejects_an_unknown_ca(ca: trustme.CA) -> None:
    server = StubRestServer(ssl_context=tls_server_context(ca))
    other = trustme.CA()
    creds = ChannelCredentialsConfig(ca_certificate=other.cert_pem.bytes())
    transport = RestTransport(ServerTarget(server.url, credentials=creds), policy=FAST)
    try:
        stream = transport.open(SPEC)
        stream.send(first())
        with pytest.raises(TransportError, match="TLS verification failed") as info:
            stream.recv(5)
        assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
        assert len(server.requests) == 0
    finally:
        transport.close()
        server.close()


def test_https_server_name_override(ca: trustme.CA) -> None:
    cert = ca.issue_cert("cp.internal")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    server = StubRestServer(ssl_context=context)
    creds = ChannelCredentialsConfig(
        ca_certificate=ca.cert_pem.bytes(), server_name_override="cp.internal"
    )
    transport = RestTransport(ServerTarget(server.url, credentials=creds), policy=FAST)
    try:
        server.set(CLUSTER, "1", {})
        stream = transport.open(SPEC)
        stream.send(first())
        assert stream.recv(5) is not None
    finally:
        transport.close()
        server.close()


def test_mutual_tls(ca: trustme.CA, tmp_path: object) -> None:
    context = tls_server_context(ca)
    context.verify_mode = ssl.CERT_REQUIRED
    ca.configure_trust(context)
    server = StubRestServer(ssl_context=context)
    client_cert = ca.issue_cert("client@example")
    creds = ChannelCredentialsConfig(
        ca_certificate=ca.cert_pem.bytes(),
        certificate_chain=b"".join(b.bytes() for b in client_cert.cert_chain_pems),
        private_key=client_cert.private_key_pem.bytes(),
    )
    assert "PRIVATE" not in repr(creds)
    transport = RestTransport(ServerTarget(server.url, credentials=creds), policy=FAST)
    try:
        server.set(CLUSTER, "1", {})
        stream = transport.open(SPEC)
        stream.send(first())
        assert stream.recv(5) is not None
    finally:
        transport.close()
        server.close()


def test_polls_updates_then_fails(server: StubRestServer) -> None:
    server.set(CLUSTER, "1", {"a": pack(cluster("a"))})
    transport = RestTransport(server.url, policy=FAST)
    try:
        stream = transport.open(SPEC)
        stream.send(first())
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "1"
        stream.send(DiscoveryRequest(type_url=CLUSTER, version_info="1"))
        assert stream.recv(0.2) is None
        server.set(CLUSTER, "2", {})
        response = stream.recv(5)
        assert response is not None
        assert response.version_info == "2"
        server.fail(502, count=5)
        stream.send(DiscoveryRequest(type_url=CLUSTER, version_info="2"))
        with pytest.raises(TransportError, match="502"):
            stream.recv(5)
        with pytest.raises(UsageError):
            transport.open(StreamSpec("", True, (CLUSTER,)))
    finally:
        transport.close()


def test_probe(server: StubRestServer, ca: trustme.CA) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    assert RestTransport(server.url).probe(2) is True
    assert RestTransport(dead).probe(0.5) is False
    tls = StubRestServer(ssl_context=tls_server_context(ca))
    try:
        trusted = ChannelCredentialsConfig(ca_certificate=ca.cert_pem.bytes())
        untrusted = ChannelCredentialsConfig(ca_certificate=trustme.CA().cert_pem.bytes())
        assert RestTransport(ServerTarget(tls.url, credentials=trusted)).probe(2)
        assert not RestTransport(ServerTarget(tls.url, credentials=untrusted)).probe(2)
    finally:
        tls.close()


def test_user_agent_and_response_size_limit(server: StubRestServer) -> None:
    server.set(CLUSTER, "1", {f"c{i}": pack(cluster(f"c{i}")) for i in range(50)})
    small = ServerTarget(server.url, max_receive_message_size=1000)
    transport = RestTransport(small, policy=FAST)
    try:
        stream = transport.open(SPEC)
        stream.send(first())
        with pytest.raises(TransportError, match="exceeds 1000 bytes"):
            stream.recv(5)
        assert server.requests[0].headers["user-agent"].startswith("xds-client/")
    finally:
        transport.close()


def test_https_without_credentials_uses_the_system_roots(ca: trustme.CA) -> None:
    # The test CA is in no system store: verification must fail, not be skipped.
    server = StubRestServer(ssl_context=tls_server_context(ca))
    transport = RestTransport(server.url, policy=FAST)
    try:
        stream = transport.open(SPEC)
        stream.send(first())
        with pytest.raises(TransportError, match="TLS verification failed"):
            stream.recv(5)
    finally:
        transport.close()
        server.close()
