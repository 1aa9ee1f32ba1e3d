# Generated from tests/lrs/test_async_lrs_client.py by tools/gen_sync.py: do not edit.
"""LrsClient against the in-process ControlPlane's LRS side (generated from
test_async_lrs_client.py).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from tests._waiting import wait_until
from xds_client import Backoff, Node
from xds_client._backends.threads import call_blocking
from xds_client.client import load_bootstrap
from xds_client.errors import ClientClosedError
from xds_client.lrs import SEND_ALL_CLUSTERS, LrsClient
from xds_client.node import Locality
from xds_client.testing import ControlPlane, RecordedLoadReport
from xds_client.transport import ChannelCredentialsConfig

pytestmark = pytest.mark.timeout(60)

FAST = Backoff(initial=0.05, maximum=0.2)
EAST = Locality(region="r", zone="east")


def issued(cluster: str, count: int) -> Callable[[RecordedLoadReport], bool]:
    """A report of ``cluster`` with ``count`` requests issued in all."""

    def fits(report: RecordedLoadReport) -> bool:
        stats = report.cluster(cluster)
        return stats is not None and count == sum(
            s.total_issued_requests for s in stats.upstream_locality_stats
        )

    return fits


def wait_report(
    cp: ControlPlane, cluster: str, fits: Callable[[RecordedLoadReport], bool]
) -> RecordedLoadReport:
    def wait() -> RecordedLoadReport:
        return cp.wait_for_load_report(cluster, predicate=fits, timeout=10)

    return call_blocking(wait)


def test_reports_reach_the_control_plane_with_the_node() -> None:
    with ControlPlane(heartbeat_interval=None) as cp:
        cp.set_load_reporting(["backend"], interval=0.05)
        with LrsClient(cp.address, node=Node(id="lrs-node"), backoff=FAST) as lrs:
            backend = lrs.store.cluster("backend")
            east = backend.locality(EAST)
            east.start()
            east.start()
            east.finish()
            east.record_load("cpu", 0.5)
            backend.drop("overload")
            lrs.store.cluster("other").drop()  # not asked for
            report = wait_report(cp, "backend", issued("backend", 2))
        first = cp.load_reports()[0]
        assert first.node_id == "lrs-node"
        assert SEND_ALL_CLUSTERS in first.request.node.client_features
        stats = report.cluster("backend")
        assert stats is not None
        (locality,) = stats.upstream_locality_stats
        assert locality.locality.zone == "east"
        assert (locality.total_successful_requests, locality.total_requests_in_progress) == (1, 1)
        assert locality.load_metric_stats[0].metric_name == "cpu"
        assert [(d.category, d.dropped_count) for d in stats.dropped_requests] == [("overload", 1)]
        assert stats.load_report_interval.ToNanoseconds() > 0
        assert not cp.load_reports("other")
        assert lrs.reports >= 1
        assert lrs.streams == 1


def test_a_new_plan_reaches_the_open_stream() -> None:
    with ControlPlane(heartbeat_interval=None) as cp:
        cp.set_load_reporting(["a"], interval=0.05)
        with LrsClient(cp.address, node=Node(id="n"), backoff=FAST) as lrs:
            lrs.store.cluster("a").locality().start()
            lrs.store.cluster("b").locality().start()
            wait_report(cp, "a", issued("a", 1))
            assert not cp.load_reports("b")
            cp.set_load_reporting(None, interval=0.05)  # send_all_clusters
            wait_report(cp, "b", issued("b", 1))
            assert lrs.streams == 1
            assert lrs.reporter is not None
            assert lrs.reporter.plan is not None
            assert lrs.reporter.plan.all_clusters


def test_a_lost_stream_is_opened_again_and_reports_what_came_meanwhile() -> None:
    with ControlPlane(heartbeat_interval=None) as cp:
        cp.set_load_reporting(interval=0.05)
        with LrsClient(cp.address, node=Node(id="n"), backoff=FAST) as lrs:
            recorder = lrs.store.cluster("a").locality()
            recorder.start()
            wait_report(cp, "a", issued("a", 1))
            cp.stop_serving()
            recorder.start()
            recorder.start()
            cp.resume_serving()
            report = wait_report(cp, "a", issued("a", 2))
            assert report.stream > 1
            assert lrs.streams > 1


class _Metadata(grpc.ServerInterceptor):
    """Keeps the metadata of each LRS call."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method.endswith("/StreamLoadStats"):
            self.seen.append(dict(details.invocation_metadata))
        return continuation(details)


def test_the_bearer_token_goes_with_the_stream_and_close_is_final() -> None:
    seen = _Metadata()
    with ControlPlane(heartbeat_interval=None, interceptors=[seen]) as cp:
        cp.set_load_reporting(interval=0.05)
        lrs = LrsClient(cp.address, node=Node(id="n"), bearer_token="s3cret", backoff=FAST)
        assert "s3cret" not in repr(lrs)
        lrs.start()
        lrs.store.cluster("a").locality().start()
        wait_report(cp, "a", issued("a", 1))
        lrs.close()
        assert seen.seen[0]["authorization"] == "Bearer s3cret"
        with pytest.raises(ClientClosedError):
            lrs.start()


def _jwt(marker: str) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'exp': time.time() + 3600, 'm': marker})}.sig"


def test_a_bootstrap_server_brings_its_tls_and_token_file(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    creds = grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), b"".join(b.bytes() for b in cert.cert_chain_pems))]
    )
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.cert_pem.bytes())
    token = _jwt("lrs-secret")
    (tmp_path / "token").write_text(token)
    seen = _Metadata()
    with ControlPlane(
        heartbeat_interval=None, rest_port=None, server_credentials=creds, interceptors=[seen]
    ) as cp:
        cp.set_load_reporting(interval=0.05)
        config = cp.bootstrap()
        config["xds_servers"][0]["channel_creds"] = [
            {"type": "tls", "config": {"ca_certificate_file": str(ca_file)}}
        ]
        config["xds_servers"][0]["call_creds"] = [
            {"type": "jwt_token_file", "config": {"jwt_token_file": str(tmp_path / "token")}}
        ]
        (tmp_path / "bootstrap.json").write_text(json.dumps(config))
        boot = load_bootstrap(tmp_path / "bootstrap.json")
        # The xDS client's own server entry: the same TLS and call credentials.
        with LrsClient(boot.servers[0], node=boot.node, backoff=FAST) as lrs:
            lrs.store.cluster("a").locality().start()
            wait_report(cp, "a", issued("a", 1))
            assert "lrs-secret" not in repr(lrs)
        assert seen.seen[0]["authorization"] == f"Bearer {token}"


def test_a_credentials_file_that_cannot_be_read_is_logged_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="xds_client.lrs")
    missing = tmp_path / "no-such-ca.pem"
    lrs = LrsClient(
        "127.0.0.1:1",
        node=Node(id="n"),
        credentials=ChannelCredentialsConfig(ca_certificate=str(missing)),
        backoff=FAST,
    ).start()
    try:
        # Off the loop (call_blocking), so the client's task runs meanwhile.
        call_blocking(
            wait_until, lambda: caplog.text.count("no-such-ca.pem") >= 2, 10.0, "two warnings"
        )
    finally:
        lrs.close()
    assert "Traceback" not in caplog.text
    assert lrs.streams == 0
