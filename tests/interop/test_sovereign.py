"""REST-JSON polling against sovereign, a real REST control plane (its own venv in .peers).

sovereign renders Jinja2 templates per type, answers 200 then 304 for a
current version, reads only snake_case request fields, needs ``node.cluster``
and rejects an ``error_detail`` without ``details`` (422). Its template context
is re-read every second here (``refresh_rate: 1``), so editing the context
file changes the served clusters.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest
from google.protobuf.message import Message
from google.rpc.status_pb2 import Status

from xds_client import Node, XdsClient
from xds_client.resources import CLUSTER, LISTENER, V2_CLUSTER, decode
from xds_client.transport import StreamSpec
from xds_client.transport._polling import PollPolicy
from xds_client.transport._rest import RestTransport
from xds_client.transport._rest_codec import encode_request

pytestmark = [pytest.mark.interop, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
SOVEREIGN = ROOT / ".peers" / "sovereign" / "bin" / "sovereign"
NODE = Node("edge-1", cluster="edge")
STARTUP_TIMEOUT = 60.0

CLUSTERS_TEMPLATE = """\
resources:
  - name: backend
    connect_timeout: {{ settings.timeout }}
    type: STATIC
    load_assignment:
      cluster_name: backend
      endpoints:
        - lb_endpoints:
            - endpoint:
                address:
                  socket_address: {address: 127.0.0.1, port_value: 9000}
"""
LISTENERS_TEMPLATE = """\
resources:
  - name: ingress
    address:
      socket_address: {address: 127.0.0.1, port_value: 10000}
"""


@dataclass
class Sovereign:
    url: str
    context_file: Path
    log_file: Path

    def set_timeout(self, value: str) -> None:
        tmp = self.context_file.with_suffix(".tmp")
        tmp.write_text(f"timeout: {value}\n")
        tmp.replace(self.context_file)  # atomic: sovereign never reads half a file

    def statuses(self, path: str) -> list[str]:
        """HTTP statuses of the access log lines for ``path``, oldest first."""
        out = []
        for line in self.log_file.read_text(errors="replace").splitlines():
            if line.startswith("{") and f'"uri_path": "{path}"' in line:
                try:
                    out.append(str(json.loads(line)["status"]))
                except (ValueError, KeyError):
                    continue
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request(
            "POST",
            "/v3/discovery:clusters",
            encode_request(DiscoveryRequest(type_url=CLUSTER, node=NODE.to_proto())),
            {"Content-Type": "application/json"},
        )
        answer = conn.getresponse()
        # Only sovereign sets this header: another server on a reused port does not count.
        return answer.status == 200 and answer.getheader("x-sovereign-response-version") is not None
    except OSError:
        return False
    finally:
        conn.close()


def stop(proc: subprocess.Popen[bytes]) -> None:
    # gunicorn forks workers: signal the whole process group it leads.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def sovereign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sovereign]:
    if not SOVEREIGN.exists():
        pytest.skip(f"sovereign is not installed in {SOVEREIGN.parent.parent} (make peers)")
    tmp = tmp_path_factory.mktemp("sovereign")
    (tmp / "clusters.yaml").write_text(CLUSTERS_TEMPLATE)
    (tmp / "listeners.yaml").write_text(LISTENERS_TEMPLATE)
    context_file = tmp / "context.yaml"
    context_file.write_text("timeout: 5s\n")

    def spec(name: str, serialization: str) -> str:
        return f'{{protocol: file, serialization: {serialization}, path: "{tmp / name}"}}'

    (tmp / "config.yaml").write_text(
        "templates:\n"
        "  default:\n"
        f"    - type: clusters\n      spec: {spec('clusters.yaml', 'jinja2')}\n"
        f"    - type: listeners\n      spec: {spec('listeners.yaml', 'jinja2')}\n"
        "template_context:\n"
        "  refresh_rate: 1\n"
        "  context:\n"
        f"    settings: {spec('context.yaml', 'yaml')}\n"
    )
    log_file = tmp / "sovereign.log"
    deadline = time.monotonic() + STARTUP_TIMEOUT
    for _attempt in range(3):  # gunicorn needs a port number: another process may take it
        port = free_port()
        env = {
            **os.environ,
            "SOVEREIGN_CONFIG": f"file://{tmp / 'config.yaml'}",
            "SOVEREIGN_HOST": "127.0.0.1",
            "SOVEREIGN_PORT": str(port),
            "SOVEREIGN_WORKERS": "1",
        }
        with log_file.open("wb") as log:
            proc = subprocess.Popen(
                [str(SOVEREIGN)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            while not answers(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)  # bounded by the deadline above: a readiness poll
            else:
                yield Sovereign(f"http://127.0.0.1:{port}", context_file, log_file)
                return
        finally:
            stop(proc)
        if time.monotonic() > deadline:
            break
    tail = log_file.read_text(errors="replace")[-2000:]
    pytest.fail(f"sovereign did not start (exit {proc.returncode}):\n{tail}")


def wait_until(condition: object, timeout: float) -> bool:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def test_rest_polls_200_then_304_and_sees_context_changes(sovereign: Sovereign) -> None:
    sovereign.set_timeout("5s")
    policy = PollPolicy(interval=0.2, request_timeout=5)
    transport = RestTransport(sovereign.url, policy=policy)
    stream = transport.open(StreamSpec("", False, (CLUSTER, LISTENER)))
    try:
        stream.send(DiscoveryRequest(type_url=CLUSTER, node=NODE.to_proto()))
        stream.send(DiscoveryRequest(type_url=LISTENER))  # the node is added to every poll
        got = {}
        for _ in range(2):
            response = stream.recv(10)
            assert response is not None
            got[response.type_url] = response
        cluster = decode(got[CLUSTER].resources[0], Cluster)
        assert isinstance(cluster, Cluster)
        assert cluster.name == "backend"
        assert cluster.connect_timeout.seconds == 5
        listener = decode(got[LISTENER].resources[0], Listener)
        assert isinstance(listener, Listener)
        assert listener.address.socket_address.port_value == 10000
        first_version = got[CLUSTER].version_info
        assert first_version

        for type_url, response in got.items():
            stream.send(DiscoveryRequest(type_url=type_url, version_info=response.version_info))
        assert stream.recv(0.6) is None  # current: sovereign answers 304
        assert wait_until(lambda: "304" in sovereign.statuses("/v3/discovery:clusters"), 5)
        assert wait_until(lambda: "304" in sovereign.statuses("/v3/discovery:listeners"), 5)

        sovereign.set_timeout("7s")  # sovereign re-reads its context every second
        response = stream.recv(15)
        assert response is not None
        assert response.type_url == CLUSTER
        assert response.version_info != first_version
        changed = decode(response.resources[0], Cluster)
        assert isinstance(changed, Cluster)
        assert changed.connect_timeout.seconds == 7
    finally:
        transport.close()


def test_nack_with_error_detail_is_accepted(sovereign: Sovereign) -> None:
    transport = RestTransport(sovereign.url, policy=PollPolicy(interval=0.2, request_timeout=5))
    stream = transport.open(StreamSpec("", False, (LISTENER,)))
    try:
        stream.send(DiscoveryRequest(type_url=LISTENER, node=NODE.to_proto()))
        assert stream.recv(10) is not None
        before = len(sovereign.statuses("/v3/discovery:listeners"))
        nack = DiscoveryRequest(type_url=LISTENER, error_detail=Status(code=3, message="no"))
        stream.send(nack)
        assert stream.recv(0.6) is None  # the same (rejected) version is not handed out again
        after = sovereign.statuses("/v3/discovery:listeners")[before:]
        assert after
        assert "422" not in after  # sovereign validates error_detail: details must be present
    finally:
        transport.close()


def test_xds_client_over_rest(sovereign: Sovereign) -> None:
    rejected: list[str] = []

    def reject_ingress(message: Message) -> None:
        if isinstance(message, Listener) and message.name == "ingress":
            rejected.append(message.name)
            raise ValueError("listener ingress is not wanted here")

    sovereign.set_timeout("6s")
    with (
        XdsClient(
            sovereign.url,
            transport="rest",
            poll_interval=0.2,
            node=NODE,
            validators={"lds": reject_ingress},
        ) as client,
        client.watch(Cluster, "backend"),  # keeps the subscription between the waits
        client.watch(Listener, "ingress"),
    ):
        found = client.wait_for(
            Cluster, "backend", predicate=lambda c: c.connect_timeout.seconds == 6, timeout=15
        )
        assert found.load_assignment.cluster_name == "backend"
        sovereign.set_timeout("9s")
        client.wait_for(
            Cluster, "backend", predicate=lambda c: c.connect_timeout.seconds == 9, timeout=15
        )
        # The rejected listener stays out of the cache, and the polls after the
        # NACK (carrying error_detail) are still accepted by sovereign.
        assert wait_until(lambda: bool(rejected), 10)
        count = len(sovereign.statuses("/v3/discovery:listeners"))
        assert wait_until(lambda: len(sovereign.statuses("/v3/discovery:listeners")) > count, 10)
        assert "422" not in sovereign.statuses("/v3/discovery:listeners")
        assert "ingress" not in client.resources(Listener)
    assert "422" not in sovereign.statuses("/v3/discovery:clusters")


def post(sovereign: Sovereign, path: str, body: dict[str, object]) -> int:
    port = int(sovereign.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


def test_sovereign_reads_only_snake_case(sovereign: Sovereign) -> None:
    # Why our requests use the proto field names: the camelCase version is ignored.
    node = {"id": "edge-1", "cluster": "edge"}
    path = "/v3/discovery:listeners"
    assert post(sovereign, path, {"node": node}) == 200
    transport = RestTransport(sovereign.url, policy=PollPolicy(interval=0.2, request_timeout=5))
    stream = transport.open(StreamSpec("", False, (LISTENER,)))
    try:
        stream.send(DiscoveryRequest(type_url=LISTENER, node=NODE.to_proto()))
        response = stream.recv(10)
        assert response is not None
        version = response.version_info
    finally:
        transport.close()
    assert post(sovereign, path, {"node": node, "version_info": version}) == 304
    assert post(sovereign, path, {"node": node, "versionInfo": version}) == 200
    assert post(sovereign, path, {"node": {"id": "x"}}) == 422  # node.cluster is required
    detail = {"code": 3, "message": "bad"}
    assert post(sovereign, path, {"node": node, "error_detail": detail}) == 422
    assert post(sovereign, path, {"node": node, "error_detail": {**detail, "details": []}}) == 200


def test_v2_rest_polling(sovereign: Sovereign) -> None:
    transport = RestTransport(sovereign.url, policy=PollPolicy(interval=0.2, request_timeout=5))
    stream = transport.open(StreamSpec("", False, (V2_CLUSTER,)))
    try:
        stream.send(DiscoveryRequest(type_url=V2_CLUSTER, node=NODE.to_proto()))
        response = stream.recv(10)
        assert response is not None
        assert response.type_url == V2_CLUSTER
        cluster = decode(response.resources[0], V2_CLUSTER)
        assert getattr(cluster, "name", None) == "backend"
        stream.send(DiscoveryRequest(type_url=V2_CLUSTER, version_info=response.version_info))
        assert stream.recv(0.6) is None
        assert wait_until(lambda: "304" in sovereign.statuses("/v2/discovery:clusters"), 5)
    finally:
        transport.close()
