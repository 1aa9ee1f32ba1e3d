"""Property tests of the ControlPlane's per-stream logic, without gRPC.

A model client applies every response the session produces; after any sequence
of snapshot changes and (un)subscriptions, what the client holds must equal what
the control plane serves for its subscription.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from google.protobuf.duration_pb2 import Duration
from hypothesis import given, settings
from hypothesis import strategies as st

from xds_client.resources import CLUSTER, ENDPOINT, decode, unwrap
from xds_client.testing._xds._log import RequestLog
from xds_client.testing._xds._store import Entry, Store, entries_from, resource_name
from xds_client.testing._xds._streams import (
    Engine,
    StreamHandle,
    _Changed,
    _DeltaSession,
    _Request,
    _SotwSession,
)

NAMES = ["a", "b", "c", "d"]


@dataclass(frozen=True)
class Put:
    name: str
    timeout: int


@dataclass(frozen=True)
class Drop:
    name: str


@dataclass(frozen=True)
class Subscribe:
    names: frozenset[str]


@dataclass(frozen=True)
class Unsubscribe:
    names: frozenset[str]


names = st.frozensets(st.sampled_from(NAMES), max_size=3)
ops = st.lists(
    st.one_of(
        st.builds(Put, st.sampled_from(NAMES), st.integers(1, 3)),
        st.builds(Drop, st.sampled_from(NAMES)),
        st.builds(Subscribe, names),
        st.builds(Unsubscribe, names),
    ),
    max_size=25,
)


def make(kind: str) -> tuple[Store, StreamHandle]:
    store = Store()
    engine = Engine(store, RequestLog())
    info = engine.log.open_stream(kind, "/test", "test")  # type: ignore[arg-type]
    return store, StreamHandle(engine, info, None)


def put(store: Store, name: str, timeout: int) -> None:
    new = entries_from(CLUSTER, [Cluster(name=name, connect_timeout=Duration(seconds=timeout))])

    def edit(entries: dict[str, Entry]) -> None:
        entries.update(new)

    store.apply(None, {CLUSTER: edit}, None)


def drop(store: Store, name: str) -> None:
    def edit(entries: dict[str, Entry]) -> None:
        entries.pop(name, None)

    store.apply(None, {CLUSTER: edit}, None)


def served(store: Store, wildcard: bool, subscribed: set[str]) -> dict[str, str]:
    entries = store.view(None, CLUSTER).entries
    return {n: e.version for n, e in entries.items() if wildcard or n in subscribed}


@settings(max_examples=75)
@given(ops, st.booleans())
def test_delta_client_converges(steps: list[object], wildcard: bool) -> None:
    store, handle = make("delta")
    session = _DeltaSession(handle)
    held: dict[str, str] = {}
    subscribed: set[str] = set()

    def apply(outs: Sequence[tuple[str, str, str, object]]) -> None:
        for _, _, _, response in outs:
            assert isinstance(response, DeltaDiscoveryResponse)
            for resource in response.resources:
                assert resource.HasField("resource")
                held[resource.name] = resource.version
            for name in response.removed_resources:
                held.pop(name, None)

    first = DeltaDiscoveryRequest(type_url=CLUSTER)
    if not wildcard:
        first.resource_names_subscribe.append(NAMES[0])
        subscribed.add(NAMES[0])
    apply(session.handle(_Request(first, CLUSTER, "initial")))
    for step in steps:
        if isinstance(step, Put):
            put(store, step.name, step.timeout)
            apply(session.handle(_Changed(frozenset({CLUSTER}))))
        elif isinstance(step, Drop):
            drop(store, step.name)
            apply(session.handle(_Changed(frozenset({CLUSTER}))))
        elif isinstance(step, Subscribe):
            subscribed |= step.names
            request = DeltaDiscoveryRequest(
                type_url=CLUSTER, resource_names_subscribe=sorted(step.names)
            )
            apply(session.handle(_Request(request, CLUSTER, "request")))
        elif isinstance(step, Unsubscribe):
            subscribed -= step.names
            request = DeltaDiscoveryRequest(
                type_url=CLUSTER, resource_names_unsubscribe=sorted(step.names)
            )
            apply(session.handle(_Request(request, CLUSTER, "request")))
            for name in step.names:
                if not wildcard:
                    held.pop(name, None)  # the client forgets what it unsubscribed
        expected = served(store, wildcard, subscribed)
        assert held == expected


@settings(max_examples=75)
@given(ops, st.booleans())
def test_sotw_client_converges(steps: list[object], wildcard: bool) -> None:
    store, handle = make("sotw")
    session = _SotwSession(handle)
    held: dict[str, str] = {}
    subscribed: set[str] = set() if wildcard else {NAMES[0]}

    def apply(outs: Sequence[tuple[str, str, str, object]]) -> None:
        for _, _, _, response in outs:
            assert isinstance(response, DiscoveryResponse)
            held.clear()  # CDS is full-state: each response is the whole set
            for any_resource in response.resources:
                message = decode(any_resource)
                assert unwrap(any_resource).name is None
                held[resource_name(message)] = entries_from(CLUSTER, [message])[
                    resource_name(message)
                ].version

    def request(classification: str = "request") -> None:
        message = DiscoveryRequest(type_url=CLUSTER, resource_names=sorted(subscribed))
        if wildcard:
            message.resource_names.append("*")
        apply(session.handle(_Request(message, CLUSTER, classification)))  # type: ignore[arg-type]

    request("initial")
    for step in steps:
        if isinstance(step, Put):
            put(store, step.name, step.timeout)
            apply(session.handle(_Changed(frozenset({CLUSTER}))))
        elif isinstance(step, Drop):
            drop(store, step.name)
            apply(session.handle(_Changed(frozenset({CLUSTER}))))
        elif isinstance(step, Subscribe):
            subscribed |= step.names
            request()
        elif isinstance(step, Unsubscribe):
            subscribed -= step.names
            request()
        if store.view(None, CLUSTER).is_set:
            assert held == served(store, wildcard, subscribed)


def test_endpoints_follow_cluster_changes_in_delta() -> None:
    store, handle = make("delta")
    session = _DeltaSession(handle)
    put(store, "a", 1)
    endpoints = entries_from(ENDPOINT, [ClusterLoadAssignment(cluster_name="a")])
    store.apply(None, {ENDPOINT: lambda entries: entries.update(endpoints)}, None)
    session.handle(_Request(DeltaDiscoveryRequest(type_url=CLUSTER), CLUSTER, "initial"))
    session.handle(
        _Request(
            DeltaDiscoveryRequest(type_url=ENDPOINT, resource_names_subscribe=["a"]),
            ENDPOINT,
            "initial",
        )
    )
    put(store, "a", 2)
    outs = session.handle(_Changed(frozenset({CLUSTER})))
    assert [o[0] for o in outs] == [CLUSTER, ENDPOINT]
