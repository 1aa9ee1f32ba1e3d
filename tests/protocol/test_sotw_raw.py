"""SotW responses whose resources arrive as serialized ``Any`` bytes (``RawDiscoveryResponse``).

The gRPC transport parses SotW responses with ``resources`` as ``repeated bytes``;
the core must treat them exactly like ordinary ``DiscoveryResponse`` objects.
Every test drives two protocols side by side, one fed ordinary responses and
one fed the same responses re-parsed as raw, and compares everything they say.
"""

from __future__ import annotations

from typing import Any

import pytest
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import Message

from xds_client import resources
from xds_client.protocol import (
    ResourceRemoved,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
)
from xds_client.protocol._raw import raw_response, raw_response_class, to_raw_response

from ._protocol_support import (
    Api,
    Harness,
    bad_any,
    make,
    pack,
    sotw,
    sotw_response,
    wrap,
)


class Pair:
    """An ordinary and a raw-fed SotW protocol, driven in step."""

    def __init__(self, api: Api, mode: str, **config: Any) -> None:
        self.plain = sotw(api, mode, **config)
        self.raw = sotw(api, mode, **config)

    def subscribe(self, type_url: str, names: list[str] | None) -> None:
        for h in (self.plain, self.raw):
            h.p.subscribe(type_url, names)
            h.start()

    def receive(self, response: DiscoveryResponse) -> list[Any]:
        raw = to_raw_response(response)
        assert all(type(r) is bytes for r in raw.resources)
        plain_events = self.plain.receive(response)
        raw_events = self.raw.receive(raw)
        assert raw_events == plain_events
        plain_reqs, raw_reqs = self.plain.flush(), self.raw.flush()
        assert [r.SerializeToString() for r in raw_reqs] == [
            r.SerializeToString() for r in plain_reqs
        ]
        return raw_events

    def advance(self, seconds: float) -> list[Any]:
        plain_events, raw_events = self.plain.advance(seconds), self.raw.advance(seconds)
        assert raw_events == plain_events
        return raw_events

    def check(self, type_url: str) -> None:
        plain = self.plain.p.resources(type_url)
        raw = self.raw.p.resources(type_url)
        assert dict(raw) == dict(plain)
        assert self.raw.p.resource_states(type_url) == self.plain.p.resource_states(type_url)


class _Counting:
    """A resource type that records what it decodes."""

    def __init__(self, rtype: Any) -> None:
        self._rtype = rtype
        self.seen: list[bytes] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rtype, name)

    def decode(self, data: bytes) -> Message:
        self.seen.append(data)
        message: Message = self._rtype.decode(data)
        return message


def decodes(h: Harness[Any], type_url: str, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Record every decode of ``type_url`` resources done by ``h``'s protocol."""
    st = h.p._types[type_url]
    counting = _Counting(st.rtype)
    monkeypatch.setattr(st, "rtype", counting)
    return counting.seen


def test_raw_class_is_wire_compatible() -> None:
    response = sotw_response(resources.CLUSTER, "7", "n7", [make(resources.CLUSTER, "c1", "x")])
    response.control_plane.identifier = "cp"
    response.canary = True
    raw = to_raw_response(response)
    assert isinstance(raw, raw_response_class())
    assert (raw.version_info, raw.type_url, raw.nonce) == ("7", resources.CLUSTER, "n7")
    assert list(raw.resources) == [response.resources[0].SerializeToString()]
    again = DiscoveryResponse.FromString(raw.SerializeToString())
    assert again == response


def test_unchanged_resources_are_recognised_by_their_bytes(
    api: Api, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pair = Pair(api, mode)
    pair.subscribe(api.cds, None)
    first = [make(api.cds, f"c{i}", "a") for i in range(5)]
    events = pair.receive(sotw_response(api.cds, "1", "n1", first))
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == [f"c{i}" for i in range(5)]
    seen = decodes(pair.raw, api.cds, monkeypatch)
    second = [*first[:2], make(api.cds, "c2", "b"), *first[3:]]
    events = pair.receive(sotw_response(api.cds, "2", "n2", second))
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == ["c2"]
    # Only the changed one is decoded (twice when its check grew it: ResourceCheck.fresh).
    assert len(set(seen)) == 1
    assert 1 <= len(seen) <= 2
    once = len(seen)
    events = pair.receive(sotw_response(api.cds, "3", "n3", second))
    assert [type(e) for e in events] == [ResponseAccepted]
    assert len(seen) == once
    pair.check(api.cds)
    # The cache entry keeps the version of the response that changed it.
    assert pair.raw.p.resources(api.cds)["c2"].version == "2"
    assert pair.raw.p.resources(api.cds)["c1"].version == "1"
    # Deleted by absence, then back with the same bytes: an update again.
    events = pair.receive(sotw_response(api.cds, "4", "n4", second[1:]))
    assert [e.name for e in events if isinstance(e, ResourceRemoved)] == ["c0"]
    events = pair.receive(sotw_response(api.cds, "5", "n5", second))
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == ["c0"]
    pair.check(api.cds)


def test_same_bytes_as_an_ordinary_response_then_raw(api: Api, mode: str) -> None:
    """The same protocol takes both forms; the cache is shared between them."""
    h = sotw(api, mode)
    h.p.subscribe(api.cds, None)
    h.start()
    items = [make(api.cds, "c1", "a"), make(api.cds, "c2", "a")]
    h.receive(sotw_response(api.cds, "1", "n1", items))
    events = h.receive(to_raw_response(sotw_response(api.cds, "2", "n2", items)))
    assert [type(e) for e in events] == [ResponseAccepted]
    events = h.receive(sotw_response(api.cds, "3", "n3", items))
    assert [type(e) for e in events] == [ResponseAccepted]
    changed = [items[0], make(api.cds, "c2", "b")]
    events = h.receive(sotw_response(api.cds, "4", "n4", changed))
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == ["c2"]
    events = h.receive(to_raw_response(sotw_response(api.cds, "5", "n5", items)))
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == ["c2"]


def test_wrappers_ttl_and_heartbeats(api: Api, mode: str) -> None:
    pair = Pair(api, mode)
    pair.subscribe(api.eds, ["e1", "e2"])
    body = make(api.eds, "e1", "a")
    pair.receive(
        sotw_response(
            api.eds, "1", "n1",
            [wrap("e1", body, version="r1", ttl=10), make(api.eds, "e2", "a")],
        )
    )  # fmt: skip
    pair.check(api.eds)
    pair.advance(5)
    # The same bytes bare, then a heartbeat: both renew; a wrong heartbeat version is refused.
    pair.receive(sotw_response(api.eds, "2", "n2", [body, make(api.eds, "e2", "a")]))
    pair.receive(sotw_response(api.eds, "3", "n3", [wrap("e1", None, version="r1", ttl=10)]))
    events = pair.receive(sotw_response(api.eds, "4", "n4", [wrap("e1", None, version="zz")]))
    assert any(isinstance(e, ResponseRejected) for e in events)
    pair.check(api.eds)
    pair.advance(20)  # whatever the TTL does, it does alike
    pair.check(api.eds)


def test_mismatched_and_broken_resources(api: Api, mode: str) -> None:
    pair = Pair(api, mode)
    pair.subscribe(api.cds, None)
    good = make(api.cds, "c1", "a")
    pair.receive(sotw_response(api.cds, "1", "n1", [good]))
    # A resource of another type, a wrapper of another type: the whole response is refused.
    for i, other in enumerate(
        [pack(make(api.lds, "l1")), wrap("x", make(api.lds, "l1")), pack(good, api.lds)]
    ):
        events = pair.receive(sotw_response(api.cds, f"b{i}", f"nb{i}", [good, other]))
        assert isinstance(events[-1], ResponseRejected)
    # An Any whose value does not parse: that one resource is refused (A46).
    events = pair.receive(sotw_response(api.cds, "2", "n2", [good, bad_any(api.cds)]))
    assert isinstance(events[-1], ResponseRejected)
    pair.check(api.cds)


def test_duplicate_names(api: Api, mode: str) -> None:
    pair = Pair(api, mode)
    pair.subscribe(api.cds, None)
    one, two = make(api.cds, "c1", "a"), make(api.cds, "c2", "a")
    pair.receive(sotw_response(api.cds, "1", "n1", [one, two]))
    cases = [
        [one, one],  # the same cached bytes twice
        [one, two, make(api.cds, "c1", "b")],  # cached bytes, then new bytes of the same name
        [make(api.cds, "c1", "b"), two, one],  # new bytes, then the cached ones
        [make(api.cds, "c3", "b"), make(api.cds, "c3", "c")],  # two new ones
        [one, two, wrap("c2", two)],  # cached bare and a wrapper
        # A broken resource before a duplicate: the first problem in order is reported.
        [one, pack(make(api.lds, "l1")), two, make(api.cds, "c1", "z")],
        [make(api.cds, "c1", "z"), pack(make(api.lds, "l1")), one],
    ]
    for i, items in enumerate(cases):
        events = pair.receive(sotw_response(api.cds, f"d{i}", f"nd{i}", items))
        assert isinstance(events[-1], ResponseRejected), i
    pair.check(api.cds)


def test_validators_and_partial_apply(api: Api, mode: str) -> None:
    def validator(message: Message) -> None:
        if "bad" in str(message):
            raise ValueError("bad resource")

    for reject_whole in (False, True):
        pair = Pair(api, mode, validators={api.cds: validator}, reject_whole_response=reject_whole)
        pair.subscribe(api.cds, None)
        items = [make(api.cds, "c1", "a"), make(api.cds, "c2", "a")]
        pair.receive(sotw_response(api.cds, "1", "n1", items))
        events = pair.receive(
            sotw_response(api.cds, "2", "n2", [make(api.cds, "c1", "bad"), items[1]])
        )
        assert isinstance(events[-1], ResponseRejected)
        # The refused bytes are not remembered: sent again, they are refused again.
        events = pair.receive(
            sotw_response(api.cds, "3", "n3", [make(api.cds, "c1", "bad"), items[1]])
        )
        assert isinstance(events[-1], ResponseRejected)
        pair.receive(sotw_response(api.cds, "4", "n4", items))
        pair.check(api.cds)


def test_unsubscribed_names_and_lazy_decode(api: Api, mode: str) -> None:
    for lazy in (False, True):
        pair = Pair(api, mode, lazy_decode=lazy)
        pair.subscribe(api.eds, ["e1"])
        items = [make(api.eds, "e1", "a"), make(api.eds, "e2", "a")]
        pair.receive(sotw_response(api.eds, "1", "n1", items))
        pair.receive(sotw_response(api.eds, "2", "n2", items))
        pair.subscribe(api.eds, ["e1", "e2"])
        events = pair.receive(sotw_response(api.eds, "3", "n3", items))
        assert [e.name for e in events if isinstance(e, ResourceUpdated)] == ["e2"]
        pair.check(api.eds)


def test_non_canonical_any_encoding_is_parsed() -> None:
    """An Any with its fields in another order is still understood, and still cached."""
    pair = Pair(
        Api("v3", resources.LISTENER, resources.ROUTE, resources.CLUSTER,
            resources.ENDPOINT, resources.SECRET),
        "single",
    )  # fmt: skip
    pair.subscribe(resources.CLUSTER, None)
    body = make(resources.CLUSTER, "c1", "a").SerializeToString()
    url = resources.CLUSTER.encode()
    reordered = b"\x12" + bytes([len(body)]) + body + b"\n" + bytes([len(url)]) + url
    assert AnyProto.FromString(reordered).value == body
    response = raw_response(
        type_url=resources.CLUSTER, version_info="1", nonce="n1", resources=[reordered]
    )
    events = pair.raw.receive(response)
    assert [e.name for e in events if isinstance(e, ResourceUpdated)] == ["c1"]
    again = raw_response(
        type_url=resources.CLUSTER, version_info="2", nonce="n2", resources=[reordered]
    )
    assert [type(e) for e in pair.raw.receive(again)] == [ResponseAccepted]
    garbage = raw_response(
        type_url=resources.CLUSTER, version_info="3", nonce="n3", resources=[b"\xff\xff\xff"]
    )
    events = pair.raw.receive(garbage)
    assert isinstance(events[-1], ResponseRejected)
    assert "resources[0]" in events[-1].errors


def test_one_content_key_per_resource_whatever_form_it_came_in() -> None:
    """The cache keeps no copy of a bare resource's bytes, only a keyed hash of its
    plain ``Any`` (its content key): the same whether the response was raw or parsed,
    so the one index names a resource sent again in either form."""
    pair = Pair(
        Api("v3", resources.LISTENER, resources.ROUTE, resources.CLUSTER,
            resources.ENDPOINT, resources.SECRET),
        "single",
    )  # fmt: skip
    pair.subscribe(resources.CLUSTER, None)
    old = make(resources.CLUSTER, "c1", "a")
    pair.receive(sotw_response(resources.CLUSTER, "1", "n1", [old]))
    blob = pack(old).SerializeToString()
    for side in (pair.raw, pair.plain):
        cache = side.p._types[resources.CLUSTER].cache
        assert cache.keys_index() == {hash(blob): "c1"}
        assert cache.key_for(old.SerializeToString()) == hash(blob)
        assert "c1" in cache.values
        assert cache.values["c1"] == old
    assert pair.raw.p.resources(resources.CLUSTER)["c1"].raw == old.SerializeToString()


def test_bytes_changed_then_changed_back_are_an_update_each_time(api: Api, mode: str) -> None:
    """The hash index forgets the old bytes of a changed resource (computed again)."""
    pair = Pair(api, mode)
    pair.subscribe(api.cds, None)
    a, b = make(api.cds, "c1", "a"), make(api.cds, "c1", "b")
    for version, body in enumerate([a, b, a, b, b], start=1):
        events = pair.receive(sotw_response(api.cds, str(version), f"n{version}", [body]))
        updated = [e.name for e in events if isinstance(e, ResourceUpdated)]
        assert updated == ([] if version == 5 else ["c1"])
    pair.check(api.cds)


def test_new_bare_resources_come_as_one_batch_and_receive_expands_it() -> None:
    """The core hands the updates of bare resources stored together over as one
    ``UpdateBatch`` (``receive_batched``); ``receive`` still returns one
    ``ResourceUpdated`` per resource, the same events in the same order."""
    from xds_client.protocol._events import UpdateBatch

    api = Api("v3", resources.LISTENER, resources.ROUTE, resources.CLUSTER,
              resources.ENDPOINT, resources.SECRET)  # fmt: skip
    clusters = [make(resources.CLUSTER, f"c{i}") for i in range(5)]
    batched = Pair(api, "single")
    batched.subscribe(resources.CLUSTER, None)
    plain = Pair(api, "single")
    plain.subscribe(resources.CLUSTER, None)
    response = sotw_response(resources.CLUSTER, "1", "n1", clusters)
    got = batched.raw.p.receive_batched(to_raw_response(response), 1.0)
    assert [type(e).__name__ for e in got] == ["UpdateBatch", "ResponseAccepted"]
    batch = got[0]
    assert isinstance(batch, UpdateBatch)
    assert batch.names == [f"c{i}" for i in range(5)]
    events = plain.raw.p.receive(to_raw_response(response), 1.0)
    assert events[:5] == batch.updates()
    assert [e.resource for e in events[:5]] == clusters  # type: ignore[union-attr]


@pytest.mark.parametrize("size", [0, 100, 127, 128, 129, 1000, 16_383, 16_384, 70_000])
def test_raw_resources_of_every_length_encoding_match_the_parsed_ones(size: int) -> None:
    """The plain ``Any`` is read without parsing it whatever the length's varint takes
    (one, two or three bytes): names, events, cache and content keys agree with the
    parsed response, and the same bytes again are recognised as unchanged."""
    from xds_client.protocol._cache import any_prefix, varint

    api = Api("v3", resources.LISTENER, resources.ROUTE, resources.CLUSTER,
              resources.ENDPOINT, resources.SECRET)  # fmt: skip
    pair = Pair(api, "single")
    pair.subscribe(resources.CLUSTER, None)
    cluster: Any = make(resources.CLUSTER, "c1")
    cluster.alt_stat_name = "x" * max(0, size - cluster.ByteSize() - 3)
    value = cluster.SerializeToString()
    blob = any_prefix(resources.CLUSTER) + varint(len(value)) + value
    assert pack(cluster).SerializeToString() == blob
    events = pair.receive(sotw_response(resources.CLUSTER, "1", "n1", [cluster]))
    assert [type(e).__name__ for e in events] == ["ResourceUpdated", "ResponseAccepted"]
    pair.check(resources.CLUSTER)
    for side in (pair.raw, pair.plain):
        assert side.p._types[resources.CLUSTER].cache.key_of("c1") == hash(blob)
    again = pair.receive(sotw_response(resources.CLUSTER, "2", "n2", [cluster]))
    assert [type(e).__name__ for e in again] == ["ResponseAccepted"]
