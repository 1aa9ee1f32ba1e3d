"""Unit tests of the client's shared parts: options, backoff, buffers, session, CSDS, bootstrap."""

from __future__ import annotations

import importlib
import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest
import tenacity
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.extensions.transport_sockets.tls.v3.secret_pb2 import Secret
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse
from hypothesis import given
from hypothesis import strategies as st

from xds_client import (
    Backoff,
    ChannelCredentialsConfig,
    ConnectivityChanged,
    Node,
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ServerTarget,
    XdsClient,
)
from xds_client.client._bootstrap import load_bootstrap, parse_bootstrap
from xds_client.client._csds import REDACTED, redact
from xds_client.client._options import build_options, normalize_names
from xds_client.client._session import (
    CloseStream,
    OpenStream,
    ProbeServer,
    SendRequest,
    Session,
)
from xds_client.client._watchers import EventBuffer, Segment, WatchEntry, WatchRegistry
from xds_client.errors import BootstrapError, ClientClosedError, UsageError
from xds_client.protocol._events import UpdateBatch
from xds_client.resources import CLUSTER, V2_CLUSTER, resource_type
from xds_client.transport import make_transport

# ---------------------------------------------------------------------------- backoff


def test_backoff_defaults_are_grpcs() -> None:
    policy = Backoff()
    assert (policy.initial, policy.multiplier, policy.jitter, policy.maximum) == (
        1.0,
        1.6,
        0.2,
        120.0,
    )


def test_backoff_grows_caps_and_resets() -> None:
    state = Backoff(jitter=0).state()
    delays = [state.next_delay() for _ in range(14)]
    assert delays[:4] == pytest.approx([1.0, 1.6, 2.56, 4.096])
    assert max(delays) == 120.0
    assert delays == sorted(delays)
    state.reset()
    assert state.next_delay() == pytest.approx(1.0)


def test_backoff_jitter_stays_within_bounds() -> None:
    state = Backoff().state(random.Random(7))
    for n in range(20):
        base = min(1.6**n, 120.0)
        assert 0.8 * base <= state.next_delay() <= 1.2 * base


def test_backoff_copies_and_tenacity_strategy() -> None:
    policy = Backoff().with_initial(0.1).with_maximum(2).with_multiplier(2).with_jitter(0)
    assert [policy.state().next_delay() for _ in range(1)] == [0.1]
    fixed = Backoff(strategy=tenacity.wait_fixed(0.25)).state()
    assert [fixed.next_delay() for _ in range(3)] == [0.25, 0.25, 0.25]
    with pytest.raises(UsageError):
        Backoff(multiplier=0.5)
    with pytest.raises(UsageError):
        Backoff(jitter=1.5)


# ---------------------------------------------------------------------------- buffers


def updated(name: str, version: str) -> ResourceUpdated[Cluster]:
    return ResourceUpdated(CLUSTER, name, version, Cluster(name=name))


def test_buffer_is_fifo_below_its_size() -> None:
    buffer = EventBuffer(10)
    events = [updated("a", "1"), updated("a", "2"), updated("b", "1")]
    buffer.put_many(events)
    assert [buffer.pop() for _ in range(3)] == events
    assert buffer.pop() is None


def test_buffer_coalesces_to_latest_per_name_when_full() -> None:
    buffer = EventBuffer(4)
    for v in range(100):
        for name in ("a", "b", "c"):
            buffer.put(updated(name, str(v)))
    buffer.put(ResourceRemoved(CLUSTER, "b", "deleted"))
    assert len(buffer) == 3  # bounded by distinct names, whatever the rate
    drained: list[Any] = []
    while (event := buffer.pop()) is not None:
        drained.append(event)
    assert [(type(e).__name__, e.name) for e in drained] == [
        ("ResourceUpdated", "a"),
        ("ResourceUpdated", "c"),
        ("ResourceRemoved", "b"),
    ]
    assert all(e.version == "99" for e in drained if isinstance(e, ResourceUpdated))
    assert buffer.coalesced == 300 + 1 - 3
    # Drained: back to a plain FIFO.
    buffer.put_many([updated("a", "x"), updated("a", "y")])
    assert [e.version for e in (buffer.pop(), buffer.pop()) if isinstance(e, ResourceUpdated)] == [
        "x",
        "y",
    ]


def _batch(version: str, names: list[str]) -> UpdateBatch:
    return UpdateBatch(CLUSTER, version, "", names, [Cluster(name=n) for n in names], None)


def test_a_pushs_updates_are_one_segment_never_folded_past_maxsize() -> None:
    """A push of N distinct new names is one item in the buffer, whatever N and
    ``maxsize``: nothing folds, each event is built as it is taken, in order."""
    buffer = EventBuffer(10)
    names = [f"c{i}" for i in range(1000)]
    buffer.put_many([Segment(_batch("1", names)), ResourceRemoved(CLUSTER, "old", "deleted")])
    assert len(buffer) == 1001
    assert len(buffer._items) == 2  # one object for the 1,000 updates
    taken: list[Any] = [buffer.pop() for _ in range(1001)]
    assert [e.name for e in taken if e is not None] == [*names, "old"]
    assert all(type(e) is ResourceUpdated and e.version == "1" for e in taken[:1000])
    assert buffer.coalesced == 0
    assert buffer.pop() is None


def test_a_later_event_supersedes_one_inside_a_segment_past_maxsize() -> None:
    """Folding reaches into segments: the latest state per name is kept, and it
    takes its place in the order of latest changes."""
    buffer = EventBuffer(3)
    buffer.put(Segment(_batch("1", ["a", "b", "c", "d"])))
    buffer.put(ResourceRemoved(CLUSTER, "b", "deleted"))
    buffer.put(Segment(_batch("2", ["c"])))
    assert len(buffer) == 4
    taken: list[Any] = [buffer.pop() for _ in range(4)]
    assert [(type(e).__name__, e.name, getattr(e, "version", "")) for e in taken if e] == [
        ("ResourceUpdated", "a", "1"),
        ("ResourceUpdated", "d", "1"),
        ("ResourceRemoved", "b", ""),
        ("ResourceUpdated", "c", "2"),
    ]
    assert buffer.coalesced == 2
    assert buffer.pop() is None


def test_a_later_event_supersedes_one_inside_an_indexed_segment() -> None:
    """The same for a watcher's part of a batch (a segment with an index of the
    batch's positions): its pending events are dropped for their later ones."""
    buffer = EventBuffer(3)
    buffer.put(Segment(_batch("1", ["a", "b", "c", "d", "e"]), [0, 2, 3, 4]))  # no "b"
    buffer.put(ResourceRemoved(CLUSTER, "c", "deleted"))
    buffer.put(Segment(_batch("2", ["d"])))
    taken: list[Any] = [buffer.pop() for _ in range(4)]
    assert [(type(e).__name__, e.name, getattr(e, "version", "")) for e in taken if e] == [
        ("ResourceUpdated", "a", "1"),
        ("ResourceUpdated", "e", "1"),
        ("ResourceRemoved", "c", ""),
        ("ResourceUpdated", "d", "2"),
    ]
    assert buffer.coalesced == 2
    assert buffer.pop() is None


def test_an_event_of_an_indexed_segment_already_handed_out_is_not_superseded() -> None:
    """A later event for a name whose part of an indexed segment was already built for
    the reader supersedes nothing: the index's position decides, not the batch's."""
    buffer = EventBuffer(3)
    buffer.put(Segment(_batch("1", ["a", "b", "c", "d", "e"]), [0, 2, 3, 4]))  # no "b"
    buffer.put(ResourceRemoved(CLUSTER, "x", "deleted"))  # still folding after a pop
    taken: list[Any] = [buffer.pop()]  # builds the segment's run: all four handed out
    buffer.put(ResourceRemoved(CLUSTER, "e", "deleted"))
    taken += [buffer.pop() for _ in range(5)]
    assert [(type(e).__name__, e.name) for e in taken if e] == [
        ("ResourceUpdated", "a"),
        ("ResourceUpdated", "c"),
        ("ResourceUpdated", "d"),
        ("ResourceUpdated", "e"),
        ("ResourceRemoved", "x"),
        ("ResourceRemoved", "e"),
    ]
    assert buffer.coalesced == 0


def test_a_named_watcher_gets_only_its_part_of_a_batch() -> None:
    s = session(["p:1"])
    named = watch(s, ["c5", "c2"])
    wild = watch(s, None)
    s.step(0.0)
    s.on_response("ads", 1, response("1", *[f"c{i}" for i in range(100)]), 0.1)
    assert isinstance(named.buffer.pop(), ConnectivityChanged)
    assert [getattr(e, "name", None) for e in iter(named.buffer.pop, None)] == ["c2", "c5"]
    assert isinstance(wild.buffer.pop(), ConnectivityChanged)
    assert len(wild.buffer) == 100
    assert len(wild.buffer._items) == 1  # one segment of the response's batch


def test_buffer_close_wakes_waiters() -> None:
    buffer = EventBuffer(4)
    woke = threading.Event()

    def wait() -> None:
        buffer.wait(5)
        woke.set()

    thread = threading.Thread(target=wait)
    thread.start()
    buffer.close()
    assert woke.wait(2)
    thread.join(2)
    buffer.put(updated("a", "1"))  # ignored once closed
    assert buffer.pop() is None


def test_registry_refcounts_names_and_wildcards() -> None:
    registry = WatchRegistry()
    one: WatchEntry[Any] = WatchEntry(CLUSTER, frozenset({"a", "b"}), EventBuffer(1))
    two: WatchEntry[Any] = WatchEntry(CLUSTER, frozenset({"b", "c"}), EventBuffer(1))
    wild: WatchEntry[Any] = WatchEntry(CLUSTER, None, EventBuffer(1))
    assert registry.add(one) == (["a", "b"], False)
    assert registry.add(two) == (["c"], False)
    assert registry.add(wild) == ([], True)
    assert registry.remove(one) == (["a"], False)
    assert registry.remove(one) == ([], False)
    assert registry.remove(two) == (["b", "c"], False)
    assert registry.remove(wild) == ([], True)


def test_normalize_names() -> None:
    assert normalize_names("a") == frozenset({"a"})
    assert normalize_names(["a", "b", "a"]) == frozenset({"a", "b"})
    assert normalize_names(None) is None
    assert normalize_names("*") is None
    with pytest.raises(UsageError):
        normalize_names([])
    with pytest.raises(UsageError):
        normalize_names(["*", "a"])
    with pytest.raises(UsageError):
        normalize_names([""])


# ---------------------------------------------------------------------------- options


def test_options_validation() -> None:
    with pytest.raises(UsageError, match="protocol"):
        build_options("x:1", protocol="incremental")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="api_version"):
        build_options("x:1", api_version="v4")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="transport"):
        build_options("x:1", transport="carrier-pigeon")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="sotw"):
        build_options("x:1", transport="rest", protocol="delta")
    with pytest.raises(UsageError, match="at least one"):
        build_options([])
    with pytest.raises(UsageError, match="not callable"):
        build_options("x:1", validators={Cluster: "nope"})  # type: ignore[dict-item]
    with pytest.raises(UsageError, match="v2"):
        build_options("x:1", api_version="v2", validators={Cluster: print})


def test_options_tokens_features_and_node() -> None:
    opts = build_options(
        ["a:1", ServerTarget("b:2")],
        bearer_token="secret-token",
        metadata={"x-tenant": "t1"},
        server_features=["ignore_resource_deletion"],
        node=Node(id="n1"),
    )
    assert opts.servers[0].call_metadata == (
        ("x-tenant", "t1"),
        ("authorization", "Bearer secret-token"),
    )
    assert opts.servers[1].call_metadata == ()
    assert opts.ignore_resource_deletion
    assert opts.node.id == "n1"
    assert "secret-token" not in repr(opts.servers[0])
    assert "secret-token" not in opts.servers[0].describe()


def test_credentials_config_hides_the_key() -> None:
    creds = ChannelCredentialsConfig(certificate_chain=b"CERT", private_key=b"KEY-MATERIAL")
    assert "KEY-MATERIAL" not in repr(creds)
    assert ServerTarget("h:1", credentials=creds).describe() == "h:1 (mtls)"
    with pytest.raises(UsageError, match="both"):
        ChannelCredentialsConfig(private_key=b"k")


def test_unknown_transport_and_unavailable_ones() -> None:
    with pytest.raises(UsageError, match="unknown transport"):
        make_transport("smoke", ServerTarget("h:1"), poll_interval=1, asynchronous=False)


def test_v3_class_with_v2_client_is_a_usage_error() -> None:
    with XdsClient("127.0.0.1:1", api_version="v2") as client:
        with pytest.raises(UsageError, match="alias 'cds'"):
            client.watch(Cluster, "a")
        assert client.watch("cds", "a").type_url == V2_CLUSTER


def test_closed_client_refuses_watches() -> None:
    client = XdsClient("127.0.0.1:1")
    client.close()
    client.close()  # idempotent
    with pytest.raises(ClientClosedError):
        client.watch(Cluster, "a")


# ---------------------------------------------------------------------------- session (no I/O)


def session(servers: list[str], **kwargs: Any) -> Session:
    kwargs.setdefault("backoff", Backoff(initial=1, multiplier=2, jitter=0, maximum=8))
    return Session(build_options(servers, node=Node(id="n"), **kwargs))


def watch(s: Session, names: list[str] | None, now: float = 0.0) -> WatchEntry[Any]:
    return s.add_watch(resource_type(Cluster), normalize_names(names), EventBuffer(100), None, now)


def response(version: str, *names: str) -> DiscoveryResponse:
    r = DiscoveryResponse(version_info=version, type_url=CLUSTER, nonce=version)
    for name in names:
        r.resources.add().Pack(Cluster(name=name))
    return r


def test_session_opens_sends_and_delivers() -> None:
    s = session(["p:1"])
    entry = watch(s, ["a"])
    actions = s.step(0.0)
    assert isinstance(actions[0], OpenStream)
    assert actions[0].spec.method.endswith("AggregatedDiscoveryService/StreamAggregatedResources")
    sends = [a for a in actions if isinstance(a, SendRequest)]
    assert [list(a.request.resource_names) for a in sends] == [["a"]]  # type: ignore[union-attr]
    s.on_response("ads", 1, response("1", "a"), 0.1)
    events = [entry.buffer.pop(), entry.buffer.pop()]
    assert isinstance(events[0], ConnectivityChanged)
    assert isinstance(events[1], ResourceUpdated)
    # The ACK goes out on the next step.
    ack = [a for a in s.step(0.2) if isinstance(a, SendRequest)]
    assert ack[0].request.version_info == "1"  # type: ignore[union-attr]


def test_session_backoff_and_a57_reset() -> None:
    s = session(["p:1"])
    watch(s, ["a"])
    s.step(0.0)
    s.on_failure("ads", 1, RuntimeError("refused"), 0.0)
    assert isinstance(s.step(0.0)[0], CloseStream)
    assert s.next_wakeup() == 1.0
    assert not any(isinstance(a, OpenStream) for a in s.step(0.5))
    assert any(isinstance(a, OpenStream) for a in s.step(1.0))
    s.on_failure("ads", 2, RuntimeError("refused"), 1.0)
    s.step(1.0)
    assert s.next_wakeup() == 3.0  # 1 s, then 2 s
    s.step(3.0)
    s.on_response("ads", 3, response("1", "a"), 3.1)
    s.on_failure("ads", 3, RuntimeError("reset"), 4.0)
    # A stream that delivered a response restarts at once, and the backoff starts over.
    assert any(isinstance(a, OpenStream) for a in s.step(4.0))
    s.on_failure("ads", 4, RuntimeError("refused"), 4.0)
    s.step(4.0)
    assert s.next_wakeup() == 5.0
    # Late messages from an old stream are ignored.
    s.on_response("ads", 1, response("9", "a"), 5.0)


def test_session_fallback_and_return_to_primary() -> None:
    s = session(["p:1", "s:2"], fallback_probe_interval=0.5)
    entry = watch(s, ["a"])
    actions = s.step(0.0)
    assert [a.server for a in actions if isinstance(a, OpenStream)] == [0]
    # Until a response arrives, the client checks whether the server answers at all.
    assert ProbeServer("ads", 0) in actions
    s.on_failure("ads", 1, RuntimeError("refused"), 0.1)
    actions = s.step(0.1)
    opened = [a for a in actions if isinstance(a, OpenStream)]
    assert [(a.slot, a.server) for a in opened] == [("ads", 1)]  # the secondary at once
    s.on_response("ads", 2, response("1", "a"), 0.2)
    assert s.current_server() == "s:2"
    # gRFC A71: the primary's xDS stream is tried alongside, with the primary's backoff.
    assert s.next_wakeup() == pytest.approx(1.1)
    actions = s.step(1.1)
    (trial,) = [a for a in actions if isinstance(a, OpenStream)]
    assert (trial.slot, trial.server) == ("ads~primary", 0)
    hello = [a for a in actions if isinstance(a, SendRequest) and a.slot == "ads~primary"]
    assert [list(a.request.resource_names) for a in hello] == [["a"]]  # type: ignore[union-attr]
    s.on_failure("ads~primary", trial.attempt, RuntimeError("ADS broken"), 1.2)
    assert CloseStream("ads~primary", trial.attempt) in s.step(1.2)
    assert s.current_server() == "s:2"  # a failed try moves nothing
    assert s.next_wakeup() == pytest.approx(3.2)  # 1 s, then 2 s
    (trial,) = [a for a in s.step(3.2) if isinstance(a, OpenStream)]
    # The primary answers on its xDS stream: it becomes the stream, the fallback closes.
    s.on_response("ads~primary", trial.attempt, response("p1", "a"), 3.3)
    assert s.current_server() == "p:1"
    actions = s.step(3.3)
    assert CloseStream("ads", 2) in actions
    assert not [a for a in actions if isinstance(a, OpenStream)]
    (ack,) = [a for a in actions if isinstance(a, SendRequest)]
    assert (ack.slot, ack.attempt) == ("ads~primary", trial.attempt)
    assert ack.request.version_info == "p1"  # type: ignore[union-attr]
    events = list(iter(entry.buffer.pop, None))
    connectivity = [e.connected for e in events if isinstance(e, ConnectivityChanged)]
    assert connectivity == [False, True]  # the primary's first failure; never after
    # The primary's copy has the same bytes: the cache carries over, nothing to tell.
    assert [e.version for e in events if isinstance(e, ResourceUpdated)] == ["1"]
    # Later streams of the slot keep the key the driver knows the stream by.
    s.on_failure("ads~primary", trial.attempt, RuntimeError("reset"), 4.0)
    (again,) = [a for a in s.step(4.0) if isinstance(a, OpenStream)]
    assert (again.slot, again.server) == ("ads~primary", 0)


def test_session_tells_metrics_of_every_server_switch() -> None:
    from xds_client import CountingMetrics

    metrics = CountingMetrics()
    s = session(["p:1", "s:2"], metrics=metrics)
    watch(s, ["a"])
    s.step(0.0)
    s.on_failure("ads", 1, RuntimeError("refused"), 0.1)
    s.step(0.1)
    assert metrics.server_switches == [("p:1", "s:2", "fallback")]
    s.on_response("ads", 2, response("1", "a"), 0.2)
    (trial,) = [a for a in s.step(1.2) if isinstance(a, OpenStream)]
    s.on_response("ads~primary", trial.attempt, response("p1", "a"), 1.3)
    assert metrics.server_switches == [("p:1", "s:2", "fallback"), ("s:2", "p:1", "primary")]
    # Every server failing before a response: the list starts over at the primary.
    metrics = CountingMetrics()
    s = session(["p:1", "s:2"], metrics=metrics)
    watch(s, ["a"])
    s.step(0.0)
    s.on_failure("ads", 1, RuntimeError("refused"), 0.1)
    s.step(0.1)
    s.on_failure("ads", 2, RuntimeError("refused too"), 0.2)
    assert metrics.server_switches == [("p:1", "s:2", "fallback"), ("s:2", "p:1", "retry")]


def test_session_tells_metrics_of_every_stream_it_opens_and_each_response_s_resources() -> None:
    from xds_client import CountingMetrics

    metrics = CountingMetrics()
    s = session(["p:1", "s:2"], metrics=metrics)
    watch(s, ["a"])
    s.step(0.0)
    assert metrics.streams_opened == {"p:1": 1}  # before any answer: gRFC A78's connected
    s.on_failure("ads", 1, RuntimeError("refused"), 0.1)
    s.step(0.1)
    assert metrics.streams_opened == {"p:1": 1, "s:2": 1}
    s.on_response("ads", 2, response("1", "a", "b"), 0.2)  # b was not asked for
    assert metrics.valid_updates == {(CLUSTER, "s:2"): 1}
    assert metrics.invalid_updates == {(CLUSTER, "s:2"): 0}
    # The candidate stream to the primary (gRFC A71) is a stream opened too.
    (trial,) = [a for a in s.step(1.2) if isinstance(a, OpenStream)]
    assert trial.server == 0
    assert metrics.streams_opened == {"p:1": 2, "s:2": 1}


def test_session_a_primary_whose_stream_fails_is_never_switched_to() -> None:
    # Fake clock, 60 s: the primary's health answers (probes say yes) but its xDS
    # stream always fails; the working fallback must stay, watchers hear nothing.
    s = session(["p:1", "s:2"], fallback_probe_interval=0.5,
                backoff=Backoff(initial=0.2, multiplier=1.5, jitter=0, maximum=1))  # fmt: skip
    entry = watch(s, ["a"])
    s.step(0.0)
    s.on_failure("ads", 1, RuntimeError("refused"), 0.0)
    s.step(0.0)
    s.on_response("ads", 2, response("1", "a"), 0.05)
    list(iter(entry.buffer.pop, None))
    now, tries, closes = 0.05, 0, []
    while now < 60:
        now = max(now, s.next_wakeup() or now + 0.5)
        for action in s.step(now):
            if isinstance(action, ProbeServer):
                s.on_probe(action.slot, action.server, True, now)
            elif isinstance(action, OpenStream):
                assert (action.slot, action.server) == ("ads~primary", 0)
                tries += 1
                s.on_failure(action.slot, action.attempt, RuntimeError("ADS broken"), now + 0.01)
            elif isinstance(action, CloseStream):
                closes.append(action.slot)
        now += 0.01
    assert tries >= 50  # tried again and again (capped at the backoff's maximum)
    assert set(closes) == {"ads~primary"}  # the fallback's stream was never closed
    assert s.current_server() == "s:2"
    assert list(iter(entry.buffer.pop, None)) == []  # no disconnect, no switch


def test_session_reports_a_silent_stream_up_once_its_server_answers() -> None:
    s = session(["p:1"])
    entry = watch(s, ["a"])
    assert ProbeServer("ads", 0) in s.step(0.0)
    s.on_probe("ads", 0, True, 0.05)  # up: the server answers
    s.on_response("ads", 1, response("1", "a"), 0.1)
    s.on_failure("ads", 1, RuntimeError("reset"), 0.2)  # after a response: not reported
    assert any(isinstance(a, OpenStream) for a in s.step(0.2))  # at once
    s.on_failure("ads", 2, RuntimeError("reset"), 0.2)  # before any response: down
    t = s.next_wakeup()
    assert t is not None
    actions = s.step(t)  # after the backoff: a new stream, silent, so probed
    assert ProbeServer("ads", 0) in actions
    s.on_probe("ads", 0, False, t + 0.1)
    assert s.next_wakeup() == pytest.approx(t + 1.1)  # checked again after the probe interval
    assert ProbeServer("ads", 0) in s.step(t + 1.1)
    s.on_probe("ads", 0, True, t + 1.2)
    kinds = []
    while (event := entry.buffer.pop()) is not None:
        if isinstance(event, ConnectivityChanged):
            kinds.append(event.connected)
    assert kinds == [True, False, True]


def test_a57_a_stream_that_ends_after_a_response_is_not_reported_down() -> None:
    s = session(["p:1"])
    entry = watch(s, ["a"])
    s.step(0.0)
    s.on_response("ads", 1, response("1", "a"), 0.1)
    s.on_failure("ads", 1, RuntimeError("server closed the stream"), 0.2)
    reopen = [a for a in s.step(0.2) if isinstance(a, OpenStream)]
    assert reopen  # at once, no backoff
    seen: list[bool] = []
    while (event := entry.buffer.pop()) is not None:
        if isinstance(event, ConnectivityChanged):
            seen.append(event.connected)
    assert False not in seen
    # The new stream fails before any response: now watchers hear it.
    s.on_failure("ads", reopen[0].attempt, RuntimeError("refused"), 0.3)
    down = [e for e in iter(entry.buffer.pop, None) if isinstance(e, ConnectivityChanged)]
    assert [e.connected for e in down] == [False]


def test_session_per_type_streams_use_type_services() -> None:
    s = session(["p:1"], ads=False, protocol="delta")
    watch(s, ["a"])
    s.add_watch(resource_type("eds"), frozenset({"e"}), EventBuffer(10), None, 0.0)
    opened = sorted(a.spec.method for a in s.step(0.0) if isinstance(a, OpenStream))
    assert opened == [
        "/envoy.service.cluster.v3.ClusterDiscoveryService/DeltaClusters",
        "/envoy.service.endpoint.v3.EndpointDiscoveryService/DeltaEndpoints",
    ]


def test_session_rejects_types_without_a_service() -> None:
    s = session(["p:1"], ads=False)
    with pytest.raises(UsageError, match="delta"):
        s.add_watch(resource_type("vhds"), frozenset({"v"}), EventBuffer(10), None, 0.0)


# ---------------------------------------------------------------------------- redaction


def test_redact_secrets_at_any_depth() -> None:
    secret = Secret(name="s")
    secret.tls_certificate.private_key.inline_bytes = b"KEY"
    secret.tls_certificate.password.inline_string = "PASSWORD"
    secret.tls_certificate.certificate_chain.inline_string = "CERT"
    shown = redact(secret)
    assert isinstance(shown, Secret)
    assert shown.tls_certificate.private_key.inline_string == REDACTED
    assert shown.tls_certificate.password.inline_string == REDACTED
    assert shown.tls_certificate.certificate_chain.inline_string == "CERT"
    assert secret.tls_certificate.private_key.inline_bytes == b"KEY"  # a copy

    tickets = Secret(name="t")
    tickets.session_ticket_keys.keys.add().inline_bytes = b"TICKET"
    assert b"TICKET" not in redact(tickets).SerializeToString()

    # No stubs for tls_pb2: load it untyped.
    tls_pb2: Any = importlib.import_module("envoy.extensions.transport_sockets.tls.v3.tls_pb2")
    ctx = tls_pb2.DownstreamTlsContext()
    ctx.common_tls_context.tls_certificates.add().private_key.inline_string = "NESTED"
    cluster = Cluster(name="c")
    cluster.transport_socket.typed_config.Pack(ctx)
    assert b"NESTED" not in redact(cluster).SerializeToString()
    assert b"NESTED" in cluster.SerializeToString()


# ---------------------------------------------------------------------------- bootstrap


def test_bootstrap_parses_grpc_format(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("CA")
    boot = parse_bootstrap(
        {
            "xds_servers": [
                {
                    "server_uri": "xds.example:443",
                    "channel_creds": [
                        {"type": "google_default"},
                        {"type": "tls", "config": {"ca_certificate_file": str(ca)}},
                    ],
                    "server_features": ["xds_v3", "ignore_resource_deletion"],
                    "unknown": True,
                },
                {"server_uri": "backup:80", "channel_creds": [{"type": "insecure"}]},
            ],
            "node": {"id": "n1", "cluster": "c1", "locality": {"zone": "z"}, "whatever": 1},
            "certificate_providers": {},
        }
    )
    primary, backup = boot.servers
    assert primary.uri == "xds.example:443"
    assert primary.credentials is not None
    assert primary.credentials.ca_certificate == str(ca)
    assert "ignore_resource_deletion" in primary.server_features
    assert backup.credentials is None
    assert boot.node is not None
    assert (boot.node.id, boot.node.cluster, boot.node.locality.zone) == ("n1", "c1", "z")
    opts = build_options(boot.servers, node=boot.node)
    assert opts.ignore_resource_deletion


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "xds_servers"),
        ({"xds_servers": []}, "xds_servers"),
        ({"xds_servers": [{}]}, "xds_servers[0].server_uri"),
        ({"xds_servers": [{"server_uri": 5}]}, "xds_servers[0].server_uri"),
        (
            {"xds_servers": [{"server_uri": "a", "channel_creds": [{"type": "alts"}]}]},
            "xds_servers[0].channel_creds",
        ),
        (
            {"xds_servers": [{"server_uri": "a", "channel_creds": [{"type": "insecure"}]}],
             "node": {"id": 3}},
            "node.id",
        ),
        (
            {"xds_servers": [{"server_uri": "a", "channel_creds": [
                {"type": "tls", "config": {"ca_certificate_file": "/nonexistent/ca.pem"}}]}]},
            "xds_servers[0].channel_creds[0].config.ca_certificate_file",
        ),
    ],
)  # fmt: skip
def test_bootstrap_errors_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(BootstrapError) as info:
        parse_bootstrap(data)
    assert info.value.field == field
    assert str(info.value).startswith(field)


def test_bootstrap_sources(tmp_path: Path) -> None:
    doc = {"xds_servers": [{"server_uri": "a:1", "channel_creds": [{"type": "insecure"}]}]}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    assert load_bootstrap(environ={"GRPC_XDS_BOOTSTRAP": str(path)}).servers[0].uri == "a:1"
    inline = {"GRPC_XDS_BOOTSTRAP_CONFIG": json.dumps(doc).replace("a:1", "b:2")}
    assert load_bootstrap(environ=inline).servers[0].uri == "b:2"
    with pytest.raises(BootstrapError, match="GRPC_XDS_BOOTSTRAP"):
        load_bootstrap(environ={})
    with pytest.raises(BootstrapError, match="cannot read"):
        load_bootstrap(tmp_path / "missing.json")
    path.write_text("{not json")
    with pytest.raises(BootstrapError, match="not valid JSON"):
        load_bootstrap(path)


def test_channel_options_carry_size_keepalive_and_tls_name() -> None:
    from xds_client import Keepalive
    from xds_client.transport._grpc import channel_options

    target = ServerTarget(
        "h:1",
        credentials=ChannelCredentialsConfig(server_name_override="xds.test"),
        keepalive=Keepalive(time=30, timeout=5, permit_without_calls=True),
        channel_options=(("grpc.primary_user_agent", "me"),),
    )
    options = dict(channel_options(target))
    assert options["grpc.max_receive_message_length"] == 256 * 1024 * 1024
    assert options["grpc.keepalive_time_ms"] == 30_000
    assert options["grpc.keepalive_timeout_ms"] == 5_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.ssl_target_name_override"] == "xds.test"
    assert options["grpc.primary_user_agent"] == "me"
    # The session aligns gRPC's own reconnect backoff with the client's policy.
    s = session(["h:1"], backoff=Backoff(initial=0.2, maximum=3))
    aligned = dict(s.target(0).channel_options)
    assert aligned["grpc.initial_reconnect_backoff_ms"] == 200
    assert aligned["grpc.max_reconnect_backoff_ms"] == 3000


@given(
    maxsize=st.integers(min_value=1, max_value=6),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.sampled_from("abcd"), st.integers(0, 9)),
            st.tuples(st.just("remove"), st.sampled_from("abcd"), st.just(0)),
            st.tuples(st.just("pop"), st.just(""), st.just(0)),
            st.tuples(
                st.just("batch"), st.sampled_from(["ab", "bcd", "dca", "abcd"]), st.integers(0, 9)
            ),
        ),
        max_size=60,
    ),
)
def test_buffer_never_loses_the_latest_state(maxsize: int, ops: list[tuple[str, str, int]]) -> None:
    """Single events and segments of a response's batch alike: the latest state of
    every name reaches the consumer, and memory stays bounded."""
    buffer = EventBuffer(maxsize)
    latest: dict[str, Any] = {}  # what a consumer must end up believing, per name
    seen: dict[str, Any] = {}
    for op, name, version in ops:
        if op == "batch":
            names = list(name)
            batch = UpdateBatch(
                CLUSTER, str(version), "", names, [Cluster(name=n) for n in names], None
            )
            buffer.put(Segment(batch))
            for n in names:
                latest[n] = ResourceUpdated(CLUSTER, n, str(version), Cluster(name=n))
            assert len(buffer) <= max(maxsize, 4) + len(buffer._ready)
            continue
        if op == "put":
            event: Any = updated(name, str(version))
        elif op == "remove":
            event = ResourceRemoved(CLUSTER, name, "deleted")
        else:
            popped = buffer.pop()
            if popped is not None:
                seen[popped.name] = popped  # type: ignore[union-attr]
            continue
        buffer.put(event)
        latest[name] = event
        # Bounded: plain FIFO up to maxsize, then one pending event per name (plus
        # the rest of a run of a segment's events already built for the reader).
        assert len(buffer) <= max(maxsize, 4) + len(buffer._ready)
    while (popped := buffer.pop()) is not None:
        seen[popped.name] = popped  # type: ignore[union-attr]
    assert seen == latest


def test_session_a57_timers_start_on_a_written_request() -> None:
    s = session(["p:1"], does_not_exist_timeout=5)
    entry = watch(s, ["a"])
    actions = s.step(0.0)
    (opened,) = [a for a in actions if isinstance(a, OpenStream)]
    assert [a for a in actions if isinstance(a, SendRequest)]  # queued, not on the wire
    assert s.next_wakeup() is None  # a readiness probe in flight; no timer yet
    s.on_probe("ads", 0, True, 0.1)  # the channel answers: watchers hear "up", no timer
    assert s.next_wakeup() is None
    # The request is written: its timer starts now, though the server has said nothing
    # (no headers, no response: go-control-plane holds a request for names it lacks).
    assert s.on_written("ads", opened.attempt, 2.0) is True
    assert s.next_wakeup() == pytest.approx(7.0)
    s.step(6.9)
    assert not [e for e in iter(entry.buffer.pop, None) if isinstance(e, ResourceDoesNotExist)]
    s.step(7.0)
    missing = [e for e in iter(entry.buffer.pop, None) if isinstance(e, ResourceDoesNotExist)]
    assert [e.name for e in missing] == ["a"]
