"""Hypothesis walks the SotW and delta machines against a small reference model.

Random sequences of subscribe/unsubscribe, responses (valid, invalid,
duplicate, wrong type, wildcard), heartbeats, disconnects and clock jumps. After
every step the invariants of the issue are checked:

- exactly one ACK or NACK per response processed, before any other request,
  and a NACK exactly when the model expects one;
- the cache equals the model (bytes and TTL deadlines);
- the first request of every stream carries ``node``;
- delta ``initial_resource_versions`` equals the versions the model holds;
- no ``ResourceUpdated`` for unchanged bytes, and removals exactly as modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
from envoy.service.discovery.v3.discovery_pb2 import Resource
from google.protobuf.any_pb2 import Any as AnyProto
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from xds_client import resources
from xds_client.protocol import (
    DeltaProtocol,
    ProtocolConfig,
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ResponseAccepted,
    ResponseRejected,
    SotwProtocol,
)

from ._protocol_support import (
    NODE,
    bad_any,
    delta_resource,
    delta_response,
    make,
    pack,
    sotw_response,
    wrap,
)

CDS = resources.CLUSTER  # full state in SotW
EDS = resources.ENDPOINT
TYPES = (CDS, EDS)
NAMES = ("a", "b", "c")
TTL = 5.0

type_urls = st.sampled_from(TYPES)
name_sets = st.lists(st.sampled_from(NAMES), max_size=3).map(tuple)
# (name, tag or None for a bad body or "hb" for a heartbeat, ttl)
items = st.lists(
    st.tuples(
        st.sampled_from(NAMES),
        st.sampled_from(["", "x", "y", None, "hb"]),
        st.sampled_from([None, TTL]),
    ),
    max_size=4,
)


@dataclass
class Held:
    raw: bytes
    deadline: float | None
    version: str  # delta: the resource version; SotW: the wrapper version


@dataclass
class Model:
    wildcard: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(TYPES, False))
    names: dict[str, set[str]] = field(default_factory=lambda: {t: set() for t in TYPES})
    cache: dict[str, dict[str, Held]] = field(default_factory=lambda: {t: {} for t in TYPES})
    replies: list[tuple[str, bool]] = field(default_factory=list)  # (nonce, is_nack)

    def active(self, type_url: str) -> bool:
        return self.wildcard[type_url] or bool(self.names[type_url])

    def wants(self, type_url: str, name: str) -> bool:
        return self.wildcard[type_url] or name in self.names[type_url]

    def prune(self, type_url: str) -> None:
        for name in [n for n in self.cache[type_url] if not self.wants(type_url, n)]:
            del self.cache[type_url][name]


class ProtocolMachine(RuleBasedStateMachine):
    delta = False

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.now = 0.0
        self.counter = 0
        self.streams = 0
        self.first_request_checked = True
        self.p: Any = None

    @initialize(reject_whole=st.booleans(), keep_deleted=st.booleans())
    def setup(self, reject_whole: bool, keep_deleted: bool) -> None:
        config = ProtocolConfig(
            node=NODE, reject_whole_response=reject_whole, ignore_resource_deletion=keep_deleted
        )
        self.reject_whole = reject_whole
        self.keep_deleted = keep_deleted
        self.p = DeltaProtocol(config) if self.delta else SotwProtocol(config)

    # ------------------------------------------------------------- subscriptions

    @rule(type_url=type_urls, names=name_sets, wildcard=st.booleans())
    def subscribe(self, type_url: str, names: tuple[str, ...], wildcard: bool) -> None:
        self.p.subscribe(type_url, None if wildcard else names)
        if wildcard:
            self.model.wildcard[type_url] = True
        else:
            self.model.names[type_url].update(names)

    @rule(type_url=type_urls, names=name_sets, wildcard=st.booleans())
    def unsubscribe(self, type_url: str, names: tuple[str, ...], wildcard: bool) -> None:
        self.p.unsubscribe(type_url, None if wildcard else names)
        if wildcard:
            self.model.wildcard[type_url] = False
        else:
            self.model.names[type_url].difference_update(names)
        self.model.prune(type_url)

    # ------------------------------------------------------------- stream

    @precondition(lambda self: not self.p.is_connected)
    @rule()
    def connect(self) -> None:
        self.p.connected(self.now)
        self.streams += 1
        self.first_request_checked = False
        self.model.replies.clear()
        self.initial_checked: set[str] = set()

    @precondition(lambda self: self.p.is_connected)
    @rule()
    def disconnect(self) -> None:
        self.p.disconnected(self.now)
        self.model.replies.clear()

    @rule()
    def flush(self) -> None:
        reqs = self.p.requests_to_send()
        if not self.p.is_connected:
            assert reqs == []
            return
        if reqs and not self.first_request_checked:
            assert reqs[0].HasField("node"), "the first request of a stream carries node"
            self.first_request_checked = True
        assert all(r.node == NODE for r in reqs if r.HasField("node"))
        expected = self.model.replies
        self.model.replies = []
        replies, others = reqs[: len(expected)], reqs[len(expected) :]
        assert [(r.response_nonce, r.HasField("error_detail")) for r in replies] == expected
        for r in others:
            assert not r.HasField("error_detail")
            if self.delta:
                assert r.response_nonce == ""
        if self.delta:
            for r in others:
                if r.type_url not in self.initial_checked:
                    self.initial_checked.add(r.type_url)
                    held = {n: h.version for n, h in self.model.cache[r.type_url].items()}
                    assert dict(r.initial_resource_versions) == (held if self.streams > 1 else {})
                else:
                    assert not r.initial_resource_versions
        for r in reqs:
            self.p.request_sent(r, self.now)

    @rule(seconds=st.sampled_from([0.5, 3.0, TTL, 20.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        events = self.p.tick(self.now)
        expired = set()
        for type_url in TYPES:
            cache = self.model.cache[type_url]
            for name in [n for n, h in cache.items() if h.deadline and h.deadline <= self.now]:
                del cache[name]
                expired.add((type_url, name))
        removed = {(e.type_url, e.name) for e in events if isinstance(e, ResourceRemoved)}
        assert removed == expired
        assert all(e.reason == "ttl_expired" for e in events if isinstance(e, ResourceRemoved))
        for e in events:
            if isinstance(e, ResourceDoesNotExist):
                assert e.name in self.model.names[e.type_url]
                assert e.name not in self.model.cache[e.type_url]

    # ------------------------------------------------------------- responses

    @precondition(lambda self: self.p.is_connected)
    @rule(
        type_url=type_urls,
        items=items,
        removed=name_sets,
        wrong_type=st.integers(0, 9),
        unnamed_bad=st.integers(0, 9),
    )
    def respond(
        self,
        type_url: str,
        items: list[tuple[str, str | None, float | None]],
        removed: tuple[str, ...],
        wrong_type: int,
        unnamed_bad: int,
    ) -> None:
        self.counter += 1
        nonce = f"n{self.counter}"
        version = f"v{self.counter}"
        model = self.model
        names = [n for n, _, _ in items]
        whole = len(set(names)) != len(names) or wrong_type == 0
        if self.delta:
            removed = tuple(n for n in dict.fromkeys(removed))
            whole = whole or bool(set(removed) & set(names))
            unnamed = False
        else:
            removed = ()
            unnamed = unnamed_bad == 0
        response = self._response(
            type_url,
            nonce=nonce,
            version=version,
            items=items,
            removed=removed,
            wrong_type=wrong_type == 0,
            unnamed_bad=unnamed,
        )
        events = self.p.receive(response, self.now)
        if not model.active(type_url):
            assert events == []
            return
        cache = model.cache[type_url]
        bad = unnamed
        changes: dict[str, Held] = {}
        for name, tag, ttl in items:
            if whole or not model.wants(type_url, name):
                continue
            held = cache.get(name)
            rversion = version if self.delta else (tag or "")
            if tag is None:
                bad = True
                continue
            if tag == "hb":
                if held is None:
                    continue  # nothing to keep alive (delta: "no such resource")
                # Received with no TTL, a heartbeat too: the timer is removed (seed).
                changes[name] = Held(held.raw, self.now + ttl if ttl else None, held.version)
                continue
            raw = make(type_url, name, tag).SerializeToString()
            changes[name] = Held(raw, self.now + ttl if ttl else None, rversion)
        updated: set[str] = set()
        deleted: set[str] = set()
        if not whole and not (bad and self.reject_whole):
            for name, held_new in changes.items():
                old = cache.get(name)
                if old is None or old.raw != held_new.raw:
                    updated.add(name)
                cache[name] = held_new
            if self.keep_deleted:
                pass  # gRFC A53: deletions by the server are not applied
            elif self.delta:
                for name in removed:
                    if name in cache:
                        del cache[name]
                        deleted.add(name)
            elif type_url == CDS and not unnamed:
                for name in [n for n in cache if n not in names]:
                    del cache[name]
                    deleted.add(name)
        nack = whole or bad
        model.replies.append((nonce, nack))
        got_updated = {e.name for e in events if isinstance(e, ResourceUpdated)}
        got_removed = {e.name for e in events if isinstance(e, ResourceRemoved)}
        assert got_updated == updated, "an update event exactly when the bytes changed"
        assert got_removed == deleted
        assert isinstance(events[-1], ResponseRejected if nack else ResponseAccepted)

    def _response(
        self,
        type_url: str,
        *,
        nonce: str,
        version: str,
        items: list[tuple[str, str | None, float | None]],
        removed: tuple[str, ...],
        wrong_type: bool,
        unnamed_bad: bool,
    ) -> Any:
        if self.delta:
            res: list[Resource] = []
            for name, tag, ttl in items:
                if tag == "hb":
                    held = self.model.cache[type_url].get(name)
                    hb_version = held.version if held is not None else "zz"
                    res.append(delta_resource(name, None, version=hb_version, ttl=ttl))
                    continue
                body: Any = bad_any(type_url) if tag is None else make(type_url, name, tag)
                res.append(delta_resource(name, body, version=version, ttl=ttl))
            if wrong_type:
                res.append(delta_resource("zz", make(CDS if type_url == EDS else EDS, "zz")))
            return delta_response(type_url, nonce, res, removed, version)
        anys: list[AnyProto] = []
        for name, tag, ttl in items:
            if tag == "hb":
                held = self.model.cache[type_url].get(name)
                anys.append(wrap(name, None, version=held.version if held else "", ttl=ttl))
            elif tag is None:
                anys.append(wrap(name, bad_any(type_url), ttl=ttl))
            elif ttl is None and tag != "":
                anys.append(wrap(name, make(type_url, name, tag), version=tag))
            elif ttl is None:
                anys.append(pack(make(type_url, name, tag)))
            else:
                anys.append(wrap(name, make(type_url, name, tag), version=tag, ttl=ttl))
        if wrong_type:
            anys.append(pack(make(CDS if type_url == EDS else EDS, "zz")))
        if unnamed_bad:
            anys.append(bad_any(type_url))
        return sotw_response(type_url, version, nonce, anys)

    # ------------------------------------------------------------- invariants

    @invariant()
    def cache_equals_model(self) -> None:
        if self.p is None:
            return
        for type_url in TYPES:
            got = {
                n: (c.raw, c.ttl_deadline, c.resource_version)
                for n, c in self.p.resources(type_url).items()
            }
            want = {
                n: (h.raw, h.deadline, h.version) for n, h in self.model.cache[type_url].items()
            }
            assert got == want


class DeltaMachine(ProtocolMachine):
    delta = True


TestSotwStateful = ProtocolMachine.TestCase
TestDeltaStateful = DeltaMachine.TestCase
