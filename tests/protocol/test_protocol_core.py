"""The protocol core beyond the numbered rules: misuse, validators, pollers, imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.any_pb2 import Any as AnyProto

import xds_client
from xds_client import resources
from xds_client.errors import ResourceValidationError, UsageError
from xds_client.protocol import (
    MAX_ERROR_MESSAGE,
    RESPONSE_KEY,
    DeltaProtocol,
    ProtocolConfig,
    ProtocolUsageError,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
    SotwProtocol,
)
from xds_client.protocol._timers import DeadlineQueue
from xds_client.protocol._validation import nack_message

from ._protocol_support import (
    NODE,
    V3,
    bad_any,
    delta,
    delta_resource,
    delta_response,
    make,
    names,
    sotw,
    sotw_response,
    wrap,
)

PROTOCOL_SRC = Path(xds_client.__file__).parent / "protocol"
FORBIDDEN = {"grpc", "threading", "asyncio", "socket", "time"}


def test_core_sources_import_no_io_or_clock() -> None:
    for path in sorted(PROTOCOL_SRC.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert not roots & FORBIDDEN, f"{path.name}:{node.lineno} imports {roots & FORBIDDEN}"


def test_importing_the_core_loads_no_grpc_asyncio_or_socket() -> None:
    # threading and time are loaded by the interpreter and protobuf themselves, so
    # the source scan above is what pins those two.
    code = (
        "import sys, xds_client.protocol as p;"
        "from xds_client import resources as r;"
        "from envoy.config.core.v3.base_pb2 import Node;"
        "x = p.SotwProtocol(p.ProtocolConfig(node=Node(id='n'))); x.subscribe(r.CLUSTER, None);"
        "x.connected(0.0); x.requests_to_send();"
        "print(sorted(m for m in ('grpc','asyncio','socket') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_exported_from_package() -> None:
    for name in (
        "ResourceUpdated",
        "ResourceRemoved",
        "ResourceDoesNotExist",
        "ResponseRejected",
        "ResponseAccepted",
        "ResourceDeletionIgnored",
        "ProtocolConfig",
        "SotwProtocol",
        "DeltaProtocol",
    ):
        assert name in xds_client.__all__
        assert getattr(xds_client, name) is getattr(xds_client.protocol, name)


def test_misuse_raises_usage_errors() -> None:
    p = SotwProtocol(ProtocolConfig(node=NODE))
    with pytest.raises(ProtocolUsageError, match="connected"):
        p.receive(sotw_response(resources.CLUSTER, "1", "n", []), 0.0)
    with pytest.raises(ProtocolUsageError, match="delta"):
        p.subscribe(resources.VIRTUAL_HOST, ["rc/x"])
    with pytest.raises(ProtocolUsageError, match="single string"):
        p.subscribe(resources.CLUSTER, "c1")
    with pytest.raises(ProtocolUsageError, match="type URL"):
        p.subscribe("cds", ["c1"])
    with pytest.raises(ProtocolUsageError, match="nothing is subscribed"):
        p.current_request(resources.CLUSTER)
    p.connected(0.0)
    with pytest.raises(UsageError, match="twice"):
        p.connected(0.0)
    p.disconnected(1.0)
    p.disconnected(1.0)  # idempotent
    assert p.requests_to_send() == []
    with pytest.raises(ProtocolUsageError):
        ProtocolConfig(node=NODE, does_not_exist_timeout=0)
    with pytest.raises(ProtocolUsageError):
        ProtocolConfig(node=NODE, nack_code=0)
    with pytest.raises(ProtocolUsageError, match="keyed by type URL"):
        ProtocolConfig(node=NODE, validators={"cds": lambda m: None})
    with pytest.raises(ProtocolUsageError):
        DeltaProtocol(object())  # type: ignore[arg-type]


def test_validators_reject_resources_with_their_reason() -> None:
    def no_tag(msg: Any) -> None:
        if msg.alt_stat_name:
            raise ResourceValidationError(f"alt_stat_name {msg.alt_stat_name!r} not allowed")

    def buggy(msg: Any) -> None:
        raise KeyError("oops")

    h = sotw(V3, "single", validators={resources.CLUSTER: no_tag, resources.ENDPOINT: buggy})
    h.p.subscribe(resources.CLUSTER, ["ok", "bad"])
    h.p.subscribe(resources.ENDPOINT, ["e"])
    h.start()
    events = h.receive(
        sotw_response(
            resources.CLUSTER,
            "1",
            "n1",
            [make(resources.CLUSTER, "ok"), make(resources.CLUSTER, "bad", "x")],
        )
    )
    assert names(events, ResourceUpdated) == ["ok"]
    rejected = events[-1]
    assert isinstance(rejected, ResponseRejected)
    assert rejected.errors == {"bad": "alt_stat_name 'x' not allowed"}
    events = h.receive(
        sotw_response(resources.ENDPOINT, "1", "e1", [make(resources.ENDPOINT, "e")])
    )
    assert isinstance(events[-1], ResponseRejected)
    assert events[-1].errors == {"e": "KeyError: 'oops'"}


def test_unregistered_type_is_nacked_with_a_clear_reason() -> None:
    url = "type.googleapis.com/example.NotRegistered"
    for h in (sotw(V3, "single"), delta(V3, "single")):
        h.p.subscribe(url, ["x"])
        h.start()
        if isinstance(h.p, SotwProtocol):
            response: Any = sotw_response(url, "1", "n1", [AnyProto(type_url=url, value=b"")])
        else:
            response = delta_response(url, "n1", [delta_resource("x", AnyProto(type_url=url))])
        events = h.receive(response)
        assert isinstance(events[0], ResponseRejected)
        assert "not registered" in events[0].errors[RESPONSE_KEY]
        (nack,) = h.flush()
        assert "not registered" in nack.error_detail.message


def test_nack_message_is_capped() -> None:
    errors = {f"cluster-{i:05d}": "x" * 50 for i in range(1000)}
    message = nack_message(resources.CLUSTER, "7", errors)
    assert len(message) <= MAX_ERROR_MESSAGE
    assert "cluster-00000: " in message
    assert message.endswith("more")
    short = nack_message(resources.CLUSTER, "7", {"a": "bad", "b": "worse"})
    assert short.endswith("a: bad; b: worse")
    h = sotw(V3, "single")
    h.p.subscribe(resources.CLUSTER, None)
    h.start()
    h.receive(
        sotw_response(
            resources.CLUSTER,
            "1",
            "n1",
            [wrap(f"c{i}", bad_any(resources.CLUSTER)) for i in range(500)],
        )
    )
    (nack,) = h.flush()
    assert len(nack.error_detail.message) <= MAX_ERROR_MESSAGE


def test_unchanged_bytes_are_not_decoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = resources.ResourceType.decode

    def counting(self: Any, data: bytes) -> Any:
        calls.append(len(data))
        return original(self, data)

    monkeypatch.setattr(resources.ResourceType, "decode", counting)
    for h in (sotw(V3, "single"), delta(V3, "single")):
        calls.clear()
        h.p.subscribe(resources.CLUSTER, None)
        h.start()
        items = [make(resources.CLUSTER, f"c{i}") for i in range(10)]
        if isinstance(h.p, SotwProtocol):
            first: Any = sotw_response(resources.CLUSTER, "1", "n1", items)
            items[3] = make(resources.CLUSTER, "c3", "changed")
            second: Any = sotw_response(resources.CLUSTER, "2", "n2", items)
        else:
            first = delta_response(
                resources.CLUSTER,
                "n1",
                [delta_resource(m.name, m, version="1") for m in items],  # type: ignore[attr-defined]
            )
            items[3] = make(resources.CLUSTER, "c3", "changed")
            second = delta_response(
                resources.CLUSTER,
                "n2",
                [delta_resource(m.name, m, version="2") for m in items],  # type: ignore[attr-defined]
            )
        h.receive(first)
        # Each new one decoded, and again when its check grew it (ResourceCheck.fresh).
        assert 10 <= len(calls) <= 20
        before = len(calls)
        events = h.receive(second)
        assert 1 <= len(calls) - before <= 2  # the changed one only
        assert names(events, ResourceUpdated) == ["c3"]
        assert isinstance(events[-1], ResponseAccepted)


def test_current_request_for_pollers() -> None:
    h = sotw(V3, "single")
    h.p.subscribe(resources.CLUSTER, ["c1", "c2"])
    h.start()
    h.receive(sotw_response(resources.CLUSTER, "1", "n1", [make(resources.CLUSTER, "c1")]))
    h.flush()
    poll = h.p.current_request(resources.CLUSTER)
    assert poll.node == NODE
    assert (poll.version_info, poll.response_nonce) == ("1", "n1")
    assert list(poll.resource_names) == ["c1", "c2"]
    assert not poll.HasField("error_detail")
    h.receive(sotw_response(resources.CLUSTER, "2", "n2", [wrap("c1", bad_any(resources.CLUSTER))]))
    (nack,) = h.flush()
    poll = h.p.current_request(resources.CLUSTER)
    assert poll.version_info == "1"
    assert poll.response_nonce == "n2"
    assert poll.error_detail == nack.error_detail
    h.receive(sotw_response(resources.CLUSTER, "3", "n3", [make(resources.CLUSTER, "c1")]))
    assert not h.p.current_request(resources.CLUSTER).HasField("error_detail")


def test_polling_drives_sotw_as_one_long_stream() -> None:
    # A poller with node in every request: each drained ACK/NACK is the next poll.
    h = sotw(V3, "single", node_in_every_request=True)
    h.p.subscribe(resources.CLUSTER, ["c1"])
    (first,) = h.start()
    assert first.node == NODE
    h.receive(sotw_response(resources.CLUSTER, "1", "", [make(resources.CLUSTER, "c1")]))
    (ack,) = h.flush()
    assert ack.node == NODE
    assert ack.version_info == "1"
    assert list(ack.resource_names) == ["c1"]


def test_deadline_queue() -> None:
    q: DeadlineQueue[str] = DeadlineQueue()
    assert q.next_deadline() is None
    q.arm("a", 5.0)
    q.arm("b", 3.0)
    q.arm("a", 1.0)
    assert q.next_deadline() == 1.0
    assert q.deadline("a") == 1.0
    q.cancel("a")
    assert "a" not in q
    assert q.next_deadline() == 3.0
    assert q.pop_due(2.9) == []
    assert q.pop_due(10.0) == ["b"]
    assert len(q) == 0
    for i in range(1000):
        q.arm("x", float(i))  # re-arming compacts the heap
    assert q.pop_due(998.5) == []
    assert q.pop_due(999.0) == ["x"]


def test_resource_states_cover_every_status() -> None:
    h = sotw(V3, "single", does_not_exist_timeout=1.0)
    h.p.subscribe(resources.CLUSTER, ["ok", "bad", "missing", "waiting"])
    h.start()
    h.advance(0.5)
    h.receive(
        sotw_response(
            resources.CLUSTER,
            "1",
            "n1",
            [make(resources.CLUSTER, "ok"), wrap("bad", bad_any(resources.CLUSTER))],
        )
    )
    h.p.subscribe(resources.CLUSTER, ["late"])  # never sent: no timer for it
    h.advance(0.6)
    states = {s.name: s for s in h.p.resource_states()}
    assert {n: s.status for n, s in states.items()} == {
        "ok": "ACKED",
        "bad": "NACKED",
        "missing": "DOES_NOT_EXIST",
        "waiting": "DOES_NOT_EXIST",
        "late": "REQUESTED",
    }
    assert states["ok"].version == "1"
    assert states["ok"].last_updated == 0.5
    assert states["bad"].failed_version == "1"
    assert states["bad"].failed_at == 0.5
    assert states["bad"].error
    assert states["missing"].last_updated == 1.1
    assert h.p.resource_states("type.googleapis.com/none") == []
