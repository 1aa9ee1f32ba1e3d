"""The SotW core's path for a run of new plain resources gives what the general path gives.

``SotwProtocol`` names the resources of a raw response that are all new (nothing
cached to recognise, or the misses of a re-push) in a shorter loop
(``_name_plain``) and stores them with one dict merge per index; anything it does not
handle (another encoding or type, a wrapper, a resource that does not decode or has no
name, a name twice) goes back to the general loop. Every response here goes to two
cores, one of which always takes the general path, and both must agree on the events,
the ACK or NACK, the cache and its indexes, the per-resource states and the timers.
"""

from __future__ import annotations

from typing import Any

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from google.protobuf.any_pb2 import Any as AnyProto
from hypothesis import given, settings
from hypothesis import strategies as st

from xds_client import resources
from xds_client.protocol import ProtocolConfig, ResourceUpdated, SotwProtocol
from xds_client.protocol._cache import varint
from xds_client.protocol._raw import RawDiscoveryResponse, raw_response
from xds_client.protocol._sotw import _bare_value, _plain_head

from ._protocol_support import NODE, bad_any, make, pack, wrap

CDS = resources.CLUSTER
V2_CDS = resources.V2_CLUSTER


class GeneralOnly(SotwProtocol):
    """A core that never takes the fast path."""

    def _name_plain(self, *args: Any, **kwargs: Any) -> None:
        return None


def _cluster(name: str, tag: str, size: int) -> Cluster:
    cluster: Cluster = make(CDS, name, tag=tag)  # type: ignore[assignment]
    if size:  # a value of 128 to 16,383 bytes (two-byte length), or more (three)
        cluster.alt_stat_name = tag + "-" * size
    return cluster


def _invalid(name: str) -> Cluster:
    cluster = Cluster(name=name)
    cluster.connect_timeout.seconds = -1  # (validate.rules): must be greater than 0s
    return cluster


def _reordered(message: Cluster) -> bytes:
    """An ``Any`` with ``value`` before ``type_url``: valid, but not the plain encoding."""
    value = message.SerializeToString()
    url = CDS.encode()
    return b"\x12" + varint(len(value)) + value + b"\n" + varint(len(url)) + url


_KINDS = [
    "small", "small", "big", "big", "big", "huge", "same", "bad-bytes", "invalid",
    "other-type", "twin", "wrapper", "no-name", "reordered", "trailing",
]  # fmt: skip


@st.composite
def _resource(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from(["x", "y", "z", "w", "v"]))
    kind = draw(st.sampled_from(_KINDS))
    tag = draw(st.sampled_from(["a", "b"]))
    packed: AnyProto
    if kind in ("small", "same"):
        packed = pack(_cluster(name, "a" if kind == "same" else tag, 0))
    elif kind == "big":
        packed = pack(_cluster(name, tag, 300))
    elif kind == "huge":
        packed = pack(_cluster(name, tag, 20_000))
    elif kind == "bad-bytes":
        packed = bad_any(CDS)
    elif kind == "invalid":
        packed = pack(_invalid(name))
    elif kind == "other-type":
        packed = pack(make(resources.LISTENER, name))
    elif kind == "twin":
        packed = pack(_cluster(name, tag, 300), V2_CDS)
    elif kind == "wrapper":
        packed = wrap(name, _cluster(name, tag, 300))
    elif kind == "no-name":
        packed = pack(_cluster("", tag, 300))
    elif kind == "reordered":
        return _reordered(_cluster(name, tag, 300))
    else:  # "trailing": the plain encoding followed by one more (unknown) field
        return pack(_cluster(name, tag, 300)).SerializeToString() + b"\x18\x01"
    return packed.SerializeToString()


@st.composite
def _response(draw: st.DrawFn, index: int) -> RawDiscoveryResponse:
    if draw(st.integers(0, 3)) == 0:
        # Mostly plain resources with distinct names: the fast path's whole run.
        count = draw(st.integers(0, 6))
        tags = draw(st.lists(st.sampled_from(["a", "b"]), min_size=count, max_size=count))
        resources = [
            pack(_cluster(f"c{i}", tag, 300 if i % 2 else 0)).SerializeToString()
            for i, tag in enumerate(tags)
        ]
    else:
        resources = draw(st.lists(_resource(), max_size=6))
    return raw_response(
        type_url=CDS, version_info=f"v{index}", nonce=f"n{index}", resources=resources
    )


def _state(p: SotwProtocol) -> Any:
    cache = p._types[CDS].cache
    return (
        sorted((k, v.version, v.raw, v.aliases, v.ttl) for k, v in p.resources(CDS).items()),
        sorted((s.name, s.status, s.error, s.failed_version) for s in p.resource_states(CDS)),
        p.next_deadline(),
        p.version_info(CDS),
        list(cache.values),
        dict(cache._key_of),
        dict(cache._by_key),
        {name: (r.version, r.last_updated) for name, r in cache._records.items()},
        cache.renewable,
    )


@settings(max_examples=200, deadline=None)
@given(
    wildcard=st.booleans(),
    reject_whole=st.booleans(),
    drop=st.booleans(),
    rules=st.booleans(),
    lean=st.booleans(),
    timeout=st.sampled_from([None, 15.0]),
    data=st.data(),
)
def test_responses_match_the_general_path(  # noqa: PLR0917 - hypothesis draws
    wildcard: bool,
    reject_whole: bool,
    drop: bool,
    rules: bool,
    lean: bool,
    timeout: float | None,
    data: st.DataObject,
) -> None:
    config = ProtocolConfig(
        node=NODE,
        does_not_exist_timeout=timeout,
        reject_whole_response=reject_whole,
        fail_on_data_errors=drop,
        validate_rules=rules,
        lazy_decode=lean,
    )
    fast, general = SotwProtocol(config), GeneralOnly(config)
    now = 0.0
    for p in (fast, general):
        p.subscribe(CDS, None if wildcard else ["x", "y", "c1", "c2"])
        p.connected(now)
        for request in p.requests_to_send():
            p.request_sent(request, now)
    for index in range(data.draw(st.integers(1, 6))):
        response = data.draw(_response(index))
        now += 1.0
        got = [p.receive(response, now) for p in (fast, general)]
        assert got[0] == got[1]
        assert [type(e) for e in got[0]] == [type(e) for e in got[1]]
        requests = [[r.SerializeToString() for r in p.requests_to_send()] for p in (fast, general)]
        assert requests[0] == requests[1]
        assert _state(fast) == _state(general)


def test_a_push_of_new_plain_resources_takes_the_fast_path() -> None:
    """The path is taken, for a first push and for the misses of a re-push (so the
    comparison above compares two paths), and leaves for a name sent twice."""
    taken: list[bool] = []

    class Counting(SotwProtocol):
        def _name_plain(self, *args: Any, **kwargs: Any) -> Any:
            result = super()._name_plain(*args, **kwargs)
            taken.append(result is not None)
            return result

    p = Counting(ProtocolConfig(node=NODE, does_not_exist_timeout=None))
    p.subscribe(CDS, None)
    p.connected(0.0)
    p.requests_to_send()

    def response(version: str, clusters: list[Cluster]) -> RawDiscoveryResponse:
        return raw_response(
            type_url=CDS,
            version_info=version,
            nonce=version,
            resources=[pack(c).SerializeToString() for c in clusters],
        )

    first = [_cluster(f"c{i}", "a", 300) for i in range(5)]
    events = p.receive(response("1", first), 1.0)
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == [c.name for c in first]
    assert taken == [True]
    second = [*first[:4], _cluster("c4", "b", 300)]
    events = p.receive(response("2", second), 2.0)
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == ["c4"]
    assert taken == [True, True]
    p.receive(response("3", [_cluster("d", "a", 0), _cluster("d", "b", 0)]), 3.0)
    assert taken == [True, True, False]


def test_the_plain_head_of_each_size_is_what_the_general_parser_reads() -> None:
    """``_plain_head`` against ``_bare_value`` (the general loop's reader of the plain
    encoding) for every size around the varint widths' boundaries: the same value, and
    no head an ``Any`` of a size with no plain encoding starts with."""
    prefix = b"\n\x03abc\x12"
    sizes = [*range(300), *range(2**14 - 10, 2**14 + 20), 2**21 + len(prefix) + 2]
    for size in sizes:
        head, at = _plain_head(prefix, size)
        near = range(max(0, size - 12), size + 1)
        fits = [n for n in near if len(prefix) + len(varint(n)) + n == size]
        if fits:
            assert (head, at) == (prefix + varint(fits[0]), len(prefix) + len(varint(fits[0])))
            blob = head + bytes(size - at)
            assert _bare_value(blob, prefix) == blob[at:]
        else:
            assert at == len(head) > size
