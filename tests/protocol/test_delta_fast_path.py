"""The delta core's path for a one-resource response gives what the general path gives.

``DeltaProtocol.receive`` applies the common response (one resource with a body,
nothing removed, no resource errors) on a shorter path. Every response here goes to
two cores, one of which always takes the general path, and both must agree on the
events, the ACK or NACK, the cache, the per-resource states and the timers.
"""

from __future__ import annotations

from typing import Any

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.base_pb2 import ControlPlane
from google.protobuf.struct_pb2 import Struct
from hypothesis import given, settings
from hypothesis import strategies as st

from xds_client import resources
from xds_client.protocol import DeltaProtocol, ProtocolConfig

from ._protocol_support import NODE, bad_any, delta_resource, delta_response, make, pack

CDS = resources.CLUSTER
V2_CDS = resources.V2_CLUSTER


class GeneralOnly(DeltaProtocol):
    """A core that never takes the one-resource path."""

    def _receive_one(self, *args: Any, **kwargs: Any) -> None:
        return None


def _invalid(name: str) -> Cluster:
    cluster = Cluster(name=name)
    cluster.connect_timeout.seconds = -1  # (validate.rules): must be greater than 0s
    return cluster


_BODIES = ["a", "b", "same", "bad-bytes", "invalid", "other-type", "twin", "none"]


@st.composite
def _response(draw: st.DrawFn, index: int) -> Any:
    name = draw(st.sampled_from(["x", "y", "z", "", "alias-target"]))
    kind = draw(st.sampled_from(_BODIES))
    body: Any
    if kind in ("a", "b"):
        body = pack(make(CDS, name or "x", tag=kind))
    elif kind == "same":
        body = pack(make(CDS, name or "x", tag="a"))
    elif kind == "bad-bytes":
        body = bad_any(CDS)
    elif kind == "invalid":
        body = pack(_invalid(name or "x"))
    elif kind == "other-type":
        body = pack(make(resources.LISTENER, name or "x"))
    elif kind == "twin":
        body = pack(make(CDS, name or "x", tag="twin"), V2_CDS)
    else:
        body = None
    ttl = draw(st.sampled_from([None, None, None, 5.0, -1.0]))
    aliases = draw(st.sampled_from([(), (), ("x",), ("alias",)]))
    version = draw(st.sampled_from(["1", "2", ""]))
    res = delta_resource(name, body, version=version, ttl=ttl, aliases=aliases)
    if draw(st.booleans()):
        metadata = Struct()
        metadata.update({"k": index})
        res.metadata.filter_metadata["m"].CopyFrom(metadata)
    if draw(st.integers(0, 5)) == 0:
        res.resource_name.name = "tp2-name"
    resp = delta_response(CDS, nonce=f"n{index}", resources=[res], system_version=f"v{index}")
    if draw(st.booleans()):
        resp.control_plane.CopyFrom(ControlPlane(identifier=draw(st.sampled_from(["cp", ""]))))
    extra = draw(st.integers(0, 9))
    if extra == 0:
        resp.removed_resources.append("y")
    elif extra == 1:
        resp.resources.append(delta_resource("z", pack(make(CDS, "z", tag="extra"))))
    return resp


def _state(p: DeltaProtocol) -> Any:
    return (
        sorted((k, v.version, v.raw, v.aliases, v.ttl) for k, v in p.resources(CDS).items()),
        sorted((s.name, s.status, s.error, s.failed_version) for s in p.resource_states(CDS)),
        p.next_deadline(),
        p.version_info(CDS),
    )


@settings(max_examples=150, deadline=None)
@given(
    wildcard=st.booleans(),
    reject_whole=st.booleans(),
    drop=st.booleans(),
    rules=st.booleans(),
    data=st.data(),
)
def test_one_resource_responses_match_the_general_path(
    wildcard: bool, reject_whole: bool, drop: bool, rules: bool, data: st.DataObject
) -> None:
    config = ProtocolConfig(
        node=NODE,
        does_not_exist_timeout=15.0,
        reject_whole_response=reject_whole,
        fail_on_data_errors=drop,
        validate_rules=rules,
    )
    fast, general = DeltaProtocol(config), GeneralOnly(config)
    now = 0.0
    for p in (fast, general):
        p.subscribe(CDS, None if wildcard else ["x", "y", "alias"])
        p.connected(now)
        for request in p.requests_to_send():
            p.request_sent(request, now)
    for index in range(data.draw(st.integers(1, 8))):
        response = data.draw(_response(index))
        now += 1.0
        got = [p.receive(response, now) for p in (fast, general)]
        assert got[0] == got[1]
        replies = [p.replies_to_send() for p in (fast, general)]
        assert replies[0] == replies[1]
        assert _state(fast) == _state(general)


def test_the_common_response_takes_the_short_path() -> None:
    """The path is taken (so the comparison above compares two paths)."""
    calls: list[str] = []

    class Counting(DeltaProtocol):
        def _receive_any(self, *args: Any, **kwargs: Any) -> Any:
            calls.append("any")
            return super()._receive_any(*args, **kwargs)

    p = Counting(ProtocolConfig(node=NODE, does_not_exist_timeout=None))
    p.subscribe(CDS, None)
    p.connected(0.0)
    p.requests_to_send()
    body = pack(make(CDS, "x", tag="a"))
    events = p.receive(delta_response(CDS, "n1", [delta_resource("x", body, version="1")]), 1.0)
    assert [type(e).__name__ for e in events] == ["ResourceUpdated", "ResponseAccepted"]
    assert calls == []
    p.receive(delta_response(CDS, "n2", removed=["x"]), 2.0)
    assert calls == ["any"]
