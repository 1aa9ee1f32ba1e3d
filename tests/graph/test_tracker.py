"""The dependency tracker with scripted events: completeness, no tears, loops, depth, errors."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

from envoy.config.route.v3.route_components_pb2 import Route, RouteAction, RouteMatch, VirtualHost
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from xds_client.graph import ConfigSnapshot, ConfigTracker, Connection, ResourceKey
from xds_client.protocol._events import (
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
)

from ._graph_resources import (
    aggregate,
    api_listener,
    eds_cluster,
    endpoints,
    inline_listener,
    routes,
    scoped_listener,
    server_listener,
    static_cluster,
)

TYPE_URLS = {"lds": "L", "rds": "R", "cds": "C", "eds": "E"}


def key(text: str) -> ResourceKey:
    kind, name = text.split(":", 1)
    return ResourceKey(kind, name)  # type: ignore[arg-type]


class Feed:
    """Plays the driver: keeps the subscriptions the tracker asks for, collects snapshots."""

    def __init__(self, listener: str = "L1", **kw: Any) -> None:
        self.tracker = ConfigTracker(listener, **kw)
        self.subscribed = set(self.tracker.start().subscribe)
        self.snapshots: list[ConfigSnapshot] = []
        self.unsubscribed: list[ResourceKey] = []

    def send(self, target: str, event: object) -> ConfigSnapshot | None:
        update = self.tracker.receive(key(target), event)
        self.subscribed |= set(update.subscribe)
        self.subscribed -= set(update.unsubscribe)
        self.unsubscribed.extend(update.unsubscribe)
        assert self.subscribed == self.tracker.subscribed
        if update.snapshot is not None:
            self.snapshots.append(update.snapshot)
        return update.snapshot

    def push(self, target: str, message: Message, version: str = "1") -> ConfigSnapshot | None:
        kind, name = target.split(":", 1)
        return self.send(target, ResourceUpdated(TYPE_URLS[kind], name, version, message))

    def names(self) -> set[str]:
        return {str(k) for k in self.subscribed}


def test_snapshot_only_when_every_dependency_arrived() -> None:
    feed = Feed()
    assert feed.push("lds:L1", api_listener("L1", "R1")) is None
    assert feed.names() == {"lds:L1", "rds:R1"}
    assert feed.push("rds:R1", routes("R1", "c1", weighted=("c2", "c3"))) is None
    assert feed.names() == {"lds:L1", "rds:R1", "cds:c1", "cds:c2", "cds:c3"}
    assert feed.push("cds:c1", eds_cluster("c1", "svc1")) is None
    assert feed.push("cds:c2", static_cluster("c2")) is None
    assert "eds:svc1" in feed.names()
    assert feed.push("cds:c3", eds_cluster("c3")) is None
    assert feed.push("eds:c3", endpoints("c3", 1)) is None
    snapshot = feed.push("eds:svc1", endpoints("svc1", 2))
    assert snapshot is not None
    assert snapshot.ok
    assert set(snapshot.clusters) == {"c1", "c2", "c3"}
    assert set(snapshot.endpoints) == {"svc1", "c3"}
    assert snapshot.versions[key("eds:svc1")] == "1"
    choice = snapshot.route("any", "/w")
    assert choice is not None
    assert choice.clusters == ("c2", "c3")
    # The same content again yields nothing new.
    assert feed.push("cds:c2", static_cluster("c2")) is None


def test_no_tear_when_routes_change_before_the_new_cluster_arrives() -> None:
    feed = Feed()
    feed.push("lds:L1", api_listener("L1", "R1"))
    feed.push("rds:R1", routes("R1", "old"))
    first = feed.push("cds:old", static_cluster("old"))
    assert first is not None
    # Routes now point at a new cluster: no snapshot until it arrives.
    assert feed.push("rds:R1", routes("R1", "new"), version="2") is None
    assert feed.unsubscribed == [key("cds:old")]  # unreachable: unsubscribed at once
    second = feed.push("cds:new", static_cluster("new"), version="2")
    assert second is not None
    assert set(second.clusters) == {"new"}
    assert second.versions[key("rds:R1")] == "2"
    assert (first.generation, second.generation) == (1, 2)
    assert set(first.clusters) == {"old"}  # the first snapshot is untouched


def test_missing_and_nacked_resources_complete_the_graph_with_errors() -> None:
    feed = Feed()
    feed.push("lds:L1", api_listener("L1", "R1"))
    feed.push("rds:R1", routes("R1", "gone", "bad"))
    assert feed.send("cds:gone", ResourceDoesNotExist("C", "gone")) is None
    snapshot = feed.send("cds:bad", ResponseRejected("C", "n1", "3", {"bad": "field x: bad"}))
    assert snapshot is not None
    assert dict(snapshot.errors) == {
        "cds:gone": "does not exist",
        "cds:bad": "NACKed: field x: bad",
    }
    # A NACK after a good value keeps the value (A46) and reports the error beside it.
    feed.push("cds:bad", static_cluster("bad"), version="4")
    later = feed.send("cds:bad", ResponseRejected("C", "n2", "5", {"bad": "again"}))
    assert later is not None
    assert "bad" in later.clusters
    assert later.statuses[key("cds:bad")].version == "4"
    assert later.errors["cds:bad"] == "NACKed: again"
    # A NACK for another name changes nothing.
    assert feed.send("cds:bad", ResponseRejected("C", "n3", "6", {"other": "x"})) is None


def test_listener_removal_unsubscribes_everything_below_it() -> None:
    feed = Feed()
    feed.push("lds:L1", api_listener("L1", "R1"))
    feed.push("rds:R1", routes("R1", "c1"))
    feed.push("cds:c1", eds_cluster("c1"))
    assert feed.push("eds:c1", endpoints("c1", 1)) is not None
    snapshot = feed.send("lds:L1", ResourceRemoved("L", "L1", "deleted"))
    assert snapshot is not None
    assert snapshot.listener is None
    assert dict(snapshot.errors) == {"lds:L1": "deleted"}
    assert feed.names() == {"lds:L1"}
    assert snapshot.route("h", "/c1") is None


def test_aggregate_loops_and_depth() -> None:
    feed = Feed(max_aggregate_depth=3)
    feed.push("lds:L1", api_listener("L1", "R1"))
    feed.push("rds:R1", routes("R1", "top", "deep0"))
    feed.push("cds:top", aggregate("top", "a", "leaf"))
    feed.push("cds:a", aggregate("a", "top", "leaf"))  # a -> top: a loop
    feed.push("cds:leaf", static_cluster("leaf"))
    for depth in range(4):
        feed.push(f"cds:deep{depth}", aggregate(f"deep{depth}", f"deep{depth + 1}"))
    snapshot = feed.snapshots[-1]
    assert snapshot.errors["cds:a"] == "aggregate cluster loop: top -> a -> top"
    assert snapshot.errors["cds:deep2"].startswith("aggregate cluster graph deeper than 3")
    assert "cds:deep4" not in feed.names()  # never subscribed past the limit
    assert snapshot.leaf_clusters("top") == ("leaf",)
    # Dropping "top" from the routes unsubscribes its whole subtree.
    feed.push("rds:R1", routes("R1", "deep0"), version="2")
    assert {"cds:top", "cds:a", "cds:leaf"}.isdisjoint(feed.names())


def test_inline_routes_and_server_listener_per_filter_chain() -> None:
    feed = Feed()
    snapshot = feed.push("lds:L1", inline_listener("L1", routes("inline", "c1")))
    assert snapshot is None
    snapshot = feed.push("cds:c1", static_cluster("c1"))
    assert snapshot is not None
    assert snapshot.http_managers[0].inline

    server = Feed("S")
    server.push("lds:S", server_listener("S", {"a": (1000, "RA"), "b": (2000, "RB")}, "RD"))
    assert server.names() == {"lds:S", "rds:RA", "rds:RB", "rds:RD"}
    server.push("rds:RA", routes("RA", "ca"))
    server.push("rds:RB", routes("RB", "cb"))
    server.push("rds:RD", routes("RD", "cd"))
    for name in ("ca", "cb"):
        server.push(f"cds:{name}", static_cluster(name))
    done = server.push("cds:cd", static_cluster("cd"))
    assert done is not None
    conn = Connection("10.0.0.1", 443, "10.0.0.2", source_port=2000)
    choice = done.route("h", "/cb", connection=conn)
    assert choice is not None
    assert choice.cluster == "cb"
    fallback = done.route("h", "/cd", connection=Connection("10.0.0.1", 443, "10.0.0.2", 7))
    assert fallback is not None
    assert fallback.cluster == "cd"


def script() -> list[tuple[str, Message]]:
    return [
        ("lds:L1", api_listener("L1", "R1")),
        ("rds:R1", routes("R1", "c1", "c2")),
        ("cds:c1", eds_cluster("c1")),
        ("cds:c2", aggregate("c2", "c3")),
        ("cds:c3", static_cluster("c3")),
        ("eds:c1", endpoints("c1", 1)),
    ]


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(6)), st.lists(st.integers(0, 5), max_size=6))
def test_any_order_and_repeats_give_one_complete_snapshot(
    order: list[int], repeats: list[int]
) -> None:
    """Deliveries in any order (as a server or the cache may replay them), with
    duplicates, to whatever is subscribed: exactly one snapshot, and only at the end."""
    events = script()
    feed = Feed()
    delivered: set[int] = set()
    pending = [*order, *repeats]
    for _ in itertools.count():
        ready = [i for i in pending if key(events[i][0]) in feed.subscribed]
        if not ready:
            break
        index = ready[0]
        pending.remove(index)
        delivered.add(index)
        feed.push(*events[index])
        if len(feed.snapshots) == 1 and delivered != set(range(6)):
            raise AssertionError(f"snapshot before every resource arrived: {sorted(delivered)}")
    assert delivered == set(range(6))
    assert len(feed.snapshots) == 1
    assert feed.snapshots[0].ok
    assert feed.snapshots[0].leaf_clusters("c2") == ("c3",)


class WalkEveryTime(ConfigTracker):
    """The reference: no fast path, the whole graph walked on every event."""

    def _direct_edges(self, key: ResourceKey) -> tuple[ResourceKey, ...] | None:
        return None


def event_for(draw: Callable[[st.SearchStrategy[Any]], Any], target: ResourceKey) -> object:
    """A random event about a subscribed resource: a new value, a removal or does-not-exist."""
    clusters = [f"c{i}" for i in range(5)]
    version = str(draw(st.integers(1, 3)))
    name = target.name
    fate = draw(st.sampled_from(["update", "update", "update", "gone", "missing"]))
    if fate == "gone":
        return ResourceRemoved("X", name, "deleted")
    if fate == "missing":
        return ResourceDoesNotExist("X", name)
    if target.kind == "lds":
        route = draw(st.sampled_from(["R1", "R2"]))
        return ResourceUpdated("L", name, version, api_listener(name, route))
    if target.kind == "rds":
        chosen = draw(st.lists(st.sampled_from(clusters), max_size=3, unique=True))
        return ResourceUpdated("R", name, version, routes(name, *chosen))
    if target.kind == "eds":
        return ResourceUpdated("E", name, version, endpoints(name, draw(st.integers(1, 3))))
    shape = draw(st.sampled_from(["eds", "eds", "static", "aggregate"]))
    if shape == "eds":
        message: Message = eds_cluster(name)
    elif shape == "static":
        message = static_cluster(name)
    else:
        message = aggregate(name, *draw(st.lists(st.sampled_from(clusters), max_size=2)))
    return ResourceUpdated("C", name, version, message)


def summary(snapshot: ConfigSnapshot | None) -> object:
    if snapshot is None:
        return None
    return (
        sorted(snapshot.clusters),
        sorted(snapshot.endpoints),
        sorted(snapshot.route_configs),
        sorted(snapshot.errors.items()),
        sorted((k, v) for k, v in snapshot.versions.items()),
        [(k, snapshot.clusters[k]) for k in sorted(snapshot.clusters)],
        [(k, snapshot.endpoints[k]) for k in sorted(snapshot.endpoints)],
    )


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fast_paths_agree_with_a_full_walk_every_time(data: st.DataObject) -> None:
    """Random events to whatever is subscribed, compared step by step with a tracker
    that walks the whole graph on every event."""
    fast = ConfigTracker("L1", max_aggregate_depth=3)
    slow = WalkEveryTime("L1", max_aggregate_depth=3)
    fast.start()
    slow.start()
    for _ in range(data.draw(st.integers(1, 30))):
        target = data.draw(st.sampled_from(sorted(fast.subscribed)))
        event = event_for(data.draw, target)
        got = fast.receive(target, event)
        want = slow.receive(target, event)
        assert fast.subscribed == slow.subscribed
        assert summary(got.snapshot) == summary(want.snapshot)
        if got.snapshot is not None:  # every snapshot, however broken, can be drawn
            json.dumps(got.snapshot.to_dict())
            assert got.snapshot._repr_svg_().startswith("<svg")
            assert got.snapshot.to_text().startswith("listener L1")
        assert set(got.subscribe) == set(want.subscribe)
        assert set(got.unsubscribe) == set(want.unsubscribe)


def test_inline_scoped_routes_pick_the_scope_from_headers() -> None:
    feed = Feed()
    feed.push(
        "lds:L1", scoped_listener("L1", {"foo": routes("RF", "cf"), "bar": routes("RB", "cb")})
    )
    assert feed.names() == {"lds:L1", "cds:cf", "cds:cb"}
    feed.push("cds:cf", static_cluster("cf"))
    snapshot = feed.push("cds:cb", static_cluster("cb"))
    assert snapshot is not None
    assert snapshot.http_managers[0].scoped == ("RF", "RB")

    def cluster_for(addr: str | None, path: str) -> str | None:
        headers = {} if addr is None else {"addr": addr}
        choice = snapshot.route("h", path, headers=headers)
        return None if choice is None else choice.cluster

    assert cluster_for("foo=1;x-foo-key=bar", "/cb") == "cb"
    assert cluster_for("x-foo-key=foo", "/cf") == "cf"
    assert cluster_for("x-foo-key=foo", "/cb") is None  # the scope's routes do not have it
    assert cluster_for("x-foo-key=baz", "/cf") is None  # no such scope: 404
    assert cluster_for(None, "/cf") is None


def test_inline_scopes_naming_rds_routes_are_an_error_as_in_envoy() -> None:
    listener = scoped_listener("L1", {"foo": routes("RF", "cf")})
    manager = _unpack_hcm(listener)
    scope = manager.scoped_routes.scoped_route_configurations_list.scoped_route_configurations[0]
    scope.ClearField("route_configuration")
    scope.route_configuration_name = "RF"
    listener.api_listener.api_listener.value = manager.SerializeToString()
    snapshot = Feed().push("lds:L1", listener)
    assert snapshot is not None
    assert "not supported with inline scoped routes" in snapshot.errors["lds:L1"]


def _unpack_hcm(listener: Any) -> Any:
    from envoy.extensions.filters.network.http_connection_manager.v3.http_connection_manager_pb2 import (  # noqa: E501
        HttpConnectionManager,
    )

    manager = HttpConnectionManager()
    manager.ParseFromString(listener.api_listener.api_listener.value)
    return manager


def test_aggregate_without_leaves_is_an_error() -> None:
    feed = Feed()
    feed.push("lds:L1", api_listener("L1", "R1"))
    feed.push("rds:R1", routes("R1", "x", "empty"))
    feed.push("cds:x", aggregate("x", "y"))
    feed.push("cds:empty", aggregate("empty"))
    snapshot = feed.push("cds:y", aggregate("y", "x"))
    assert snapshot is not None
    assert snapshot.errors["cds:empty"] == "aggregate cluster has no children"
    assert snapshot.errors["cds:y"] == "aggregate cluster loop: x -> y -> x"
    assert snapshot.errors["cds:x"] == "aggregate cluster graph has no leaf clusters"
    assert snapshot.leaf_clusters("x") == ()


def test_the_managers_strip_any_host_port_applies_to_route() -> None:
    config = RouteConfiguration(
        name="R",
        virtual_hosts=[
            VirtualHost(
                name="v",
                domains=["example.com"],
                routes=[Route(match=RouteMatch(prefix="/"), route=RouteAction(cluster="c"))],
            )
        ],
    )
    listener = inline_listener("L1", config)
    for strip in (False, True):
        manager = _unpack_hcm(listener)
        manager.strip_any_host_port = strip
        listener.api_listener.api_listener.value = manager.SerializeToString()
        feed = Feed()
        feed.push("lds:L1", listener)
        snapshot = feed.push("cds:c", static_cluster("c"))
        assert snapshot is not None
        assert (snapshot.route("example.com:8080", "/") is not None) is strip


def test_an_authority_follows_only_its_virtual_host() -> None:
    config = RouteConfiguration(
        name="R1",
        virtual_hosts=[
            VirtualHost(
                name="shop",
                domains=["shop.example.com"],
                routes=[Route(match=RouteMatch(prefix="/"), route=RouteAction(cluster="shop"))],
            ),
            VirtualHost(
                name="rest",
                domains=["*"],
                routes=[Route(match=RouteMatch(prefix="/"), route=RouteAction(cluster="rest"))],
            ),
        ],
    )
    feed = Feed(authority="shop.example.com")
    feed.push("lds:L1", api_listener("L1", "R1"))
    feed.push("rds:R1", config)
    assert feed.names() == {"lds:L1", "rds:R1", "cds:shop"}
    snapshot = feed.push("cds:shop", static_cluster("shop"))
    assert snapshot is not None
    assert snapshot.ok
    # No virtual host for the authority: an error of the route configuration.
    config.virtual_hosts.pop()
    lonely = Feed(authority="other.org")
    lonely.push("lds:L1", api_listener("L1", "R1"))
    missing = lonely.push("rds:R1", config)
    assert missing is not None
    assert missing.errors == {"rds:R1": "no virtual host matches authority 'other.org'"}


def test_a_server_listener_draws_its_filter_chains() -> None:
    feed = Feed("S")
    feed.push("lds:S", server_listener("S", {"a": (1000, "RA")}, "RD"))
    feed.push("rds:RA", routes("RA", "ca"))
    feed.push("rds:RD", routes("RD", "ca"))
    snapshot = feed.push("cds:ca", eds_cluster("ca"))
    assert snapshot is None  # its endpoints are still awaited
    snapshot = feed.send("eds:ca", ResourceDoesNotExist("E", "ca"))
    assert snapshot is not None
    text = snapshot.to_text()
    assert "├─ filter chain a" in text
    assert "└─ filter chain fallback" in text
    assert "endpoints ca  !! does not exist" in text
    assert snapshot.to_dict()["errors"] == {"eds:ca": "does not exist"}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_deferred_bursts_agree_with_a_full_walk_at_their_end(data: st.DataObject) -> None:
    """Events fed in bursts with ``defer=True`` and a ``flush()`` at each burst's end
    (what the driver does for one response): the snapshot a flush builds is the one a
    tracker walking the whole graph on every event shows last, and none is built
    before the burst ends."""
    fast = ConfigTracker("L1", max_aggregate_depth=3)
    slow = WalkEveryTime("L1", max_aggregate_depth=3)
    fast.start()
    slow.start()
    last = None
    for _ in range(data.draw(st.integers(1, 8))):
        for _ in range(data.draw(st.integers(1, 6))):
            target = data.draw(st.sampled_from(sorted(fast.subscribed)))
            event = event_for(data.draw, target)
            got = fast.receive(target, event, defer=True)
            want = slow.receive(target, event)
            assert got.snapshot is None
            assert fast.subscribed == slow.subscribed
            last = want.snapshot or last
        flushed = fast.flush().snapshot
        if flushed is not None:
            assert summary(flushed) == summary(last)
        assert fast.flush().snapshot is None  # built once
