"""Credentials from the bootstrap: A97 jwt_token_file call creds, A65 TLS files re-read.

A rotated token and a rotated CA are picked up without restarting the client,
and the token never shows in logs, reprs or errors.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from tests._waiting import wait_until
from xds_client import AsyncXdsClient, XdsClient
from xds_client.client._bootstrap import parse_bootstrap
from xds_client.client._credentials import JwtTokenFile, TokenError, jwt_expiry
from xds_client.errors import BootstrapError
from xds_client.resources import CLUSTER
from xds_client.testing import ControlPlane
from xds_client.transport import ADS_METHOD

from .conftest import FAST_BACKOFF

pytestmark = pytest.mark.timeout(60)


def jwt(exp: float, marker: str) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part({'exp': exp, 'sub': marker})}.c2ln"


def test_jwt_expiry_and_errors_never_show_the_token() -> None:
    token = jwt(1234.5, "secret-marker")
    assert jwt_expiry(token, source="f") == 1234.5
    for bad in ("secret-marker", "a.secret-marker.c", jwt_payload_without_exp()):
        with pytest.raises(TokenError) as info:
            jwt_expiry(bad, source="jwt_token_file 'x'")
        assert "secret-marker" not in str(info.value)


def jwt_payload_without_exp() -> str:
    body = base64.urlsafe_b64encode(b'{"sub": "secret-marker"}').rstrip(b"=").decode()
    return f"e30.{body}.c2ln"


def test_token_cached_until_30s_before_exp(tmp_path: Path) -> None:
    path = tmp_path / "token"
    now = [1000.0]
    path.write_text(jwt(1100, "one"))
    plugin = JwtTokenFile(path, clock=lambda: now[0])
    first = plugin.token()
    path.write_text(jwt(5000, "two"))
    now[0] = 1069.0  # 31 s before exp: still cached
    assert plugin.token() == first
    assert plugin.reads == 1
    now[0] = 1070.0  # 30 s before exp: read again
    assert plugin.token() == jwt(5000, "two")
    assert plugin.reads == 2
    assert "two" not in repr(plugin)


def test_token_file_problems_name_the_file_only(tmp_path: Path) -> None:
    plugin = JwtTokenFile(tmp_path / "missing", clock=lambda: 0.0)
    with pytest.raises(TokenError, match="cannot read jwt_token_file"):
        plugin.token()
    (tmp_path / "old").write_text(jwt(10, "secret-marker"))
    with pytest.raises(TokenError, match="expired") as info:
        JwtTokenFile(tmp_path / "old", clock=lambda: 0.0).token()
    assert "secret-marker" not in str(info.value)


def test_bootstrap_call_creds_and_google_default() -> None:
    server = {"server_uri": "x:1", "channel_creds": [{"type": "insecure"}]}
    boot = parse_bootstrap(
        {
            "xds_servers": [
                {**server, "call_creds": [{"type": "other"}, {"type": "jwt_token_file",
                                                               "config": {"jwt_token_file": "/t"}}]}
            ]
        }
    )  # fmt: skip
    assert boot.servers[0].call_credentials is not None
    assert parse_bootstrap({"xds_servers": [server]}).servers[0].call_credentials is None
    with pytest.raises(BootstrapError, match=r"call_creds\[0\]\.config\.jwt_token_file"):
        parse_bootstrap({"xds_servers": [{**server, "call_creds": [{"type": "jwt_token_file"}]}]})
    only_google = {"server_uri": "x:1", "channel_creds": [{"type": "google_default"}]}
    with pytest.raises(BootstrapError, match="google_default needs"):
        parse_bootstrap({"xds_servers": [only_google]})


class RecordingServer:
    """A bare gRPC server that records each ADS stream's metadata, then ends the stream."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.lock = threading.Lock()

        def ads(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            with self.lock:
                self.seen.append({k: str(v) for k, v in context.invocation_metadata()})
            return iter(())

        handler = grpc.method_handlers_generic_handler(
            ADS_METHOD.split("/")[1],
            {ADS_METHOD.split("/")[2]: grpc.stream_stream_rpc_method_handler(ads)},
        )
        self.server = grpc.server(ThreadPoolExecutor(4), handlers=[handler])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def tokens(self) -> list[str]:
        with self.lock:
            return [m.get("authorization", "") for m in self.seen]


def test_rotated_token_is_sent_without_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="xds_client")
    recorder = RecordingServer()
    token_file = tmp_path / "token"
    first = jwt(time.time() + 31.0, "first-secret")  # cached for about one second
    second = jwt(time.time() + 3600.0, "second-secret")
    token_file.write_text(first)
    bootstrap = tmp_path / "bootstrap.json"
    bootstrap.write_text(json.dumps({
        "xds_servers": [{
            "server_uri": f"127.0.0.1:{recorder.port}",
            "channel_creds": [{"type": "insecure"}],
            "call_creds": [{"type": "jwt_token_file",
                            "config": {"jwt_token_file": str(token_file)}}],
        }],
        "node": {"id": "n"},
    }))  # fmt: skip
    client = XdsClient.from_bootstrap(bootstrap, backoff=FAST_BACKOFF)
    try:
        watch = client.watch(Cluster, "a")
        wait_until(lambda: f"Bearer {first}" in recorder.tokens(), 10, "the first token")
        token_file.write_text(second)
        wait_until(lambda: f"Bearer {second}" in recorder.tokens(), 10, "the rotated token")
        dump = str(client.config_dump()) + repr(client) + repr(client.servers)
        watch.close()
    finally:
        client.close()
        recorder.server.stop(None)
    for secret in ("first-secret", "second-secret", first, second):
        assert secret not in caplog.text
        assert secret not in dump


@pytest.fixture
def cas() -> tuple[trustme.CA, trustme.CA]:
    return trustme.CA(), trustme.CA()


def server_creds(ca: trustme.CA) -> grpc.ServerCredentials:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    return grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), b"".join(b.bytes() for b in cert.cert_chain_pems))]
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_rotated_ca_file_is_used_without_restart(
    tmp_path: Path, cas: tuple[trustme.CA, trustme.CA], mode: str
) -> None:
    old, new = cas
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(old.cert_pem.bytes())
    with ControlPlane(rest_port=None, heartbeat_interval=None,
                      server_credentials=server_creds(old)) as cp:  # fmt: skip
        cp.set_resources(CLUSTER, {"a": Cluster(name="a")}, version="1")
        config = cp.bootstrap()
        config["xds_servers"][0]["channel_creds"] = [
            {"type": "tls", "config": {"ca_certificate_file": str(ca_file)}}
        ]
        path = tmp_path / "bootstrap.json"
        path.write_text(json.dumps(config))

        def rotate() -> None:
            # The control plane moves to a certificate of a new CA, and so does the file.
            cp.stop_serving()
            cp.server_credentials = server_creds(new)
            ca_file.write_bytes(new.cert_pem.bytes())
            cp.resume_serving()
            cp.set_resources(CLUSTER, {"a": Cluster(name="a", alt_stat_name="v2")}, version="2")

        if mode == "sync":
            client = XdsClient.from_bootstrap(path, backoff=FAST_BACKOFF)
            try:
                with client.watch(Cluster, "a"):
                    client.wait_for(Cluster, "a", version="1", timeout=10)
                    rotate()
                    client.wait_for(Cluster, "a", version="2", timeout=15)
            finally:
                client.close()
            return

        async def run() -> None:
            aclient = AsyncXdsClient.from_bootstrap(path, backoff=FAST_BACKOFF)
            async with aclient, aclient.watch(Cluster, "a"):
                await aclient.wait_for(Cluster, "a", version="1", timeout=10)
                await asyncio.to_thread(rotate)
                await aclient.wait_for(Cluster, "a", version="2", timeout=15)

        asyncio.run(run())
