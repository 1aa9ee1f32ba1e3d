"""Metrics hooks observe a delta stream and change nothing of what it does.

Delivery is one path (``_delivery.route``) and the hooks are apart from it
(``_delivery.observe``). Every step here goes to two sessions, one of them with a
metrics object that records every hook call, and both must agree on what the reader
is told (replies, wake-up, held buffers), on every watcher's events, on the requests
in flight and on the resource states.
"""

from __future__ import annotations

from typing import Any

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryResponse
from hypothesis import given, settings
from hypothesis import strategies as st

from xds_client import Backoff
from xds_client.client._options import build_options, normalize_names
from xds_client.client._session import OpenStream, SendRequest, Session
from xds_client.client._watchers import EventBuffer, WatchEntry
from xds_client.resources import CLUSTER, resource_type


class Counting:
    """A metrics object that records every hook call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self.calls.append((name, *args))


_WATCHES = [None, ["a"], ["b"], ["a", "b"], ["alias"], ["c"]]


def _session(metrics: bool, **kwargs: Any) -> Session:
    return Session(
        build_options(
            ["p:1"], node=Node(id="n"), protocol="delta",
            backoff=Backoff(initial=1, multiplier=2, jitter=0, maximum=8),
            metrics=Counting() if metrics else None, **kwargs,
        )
    )  # fmt: skip


def _watch(s: Session, names: list[str] | None, now: float) -> WatchEntry[Any]:
    wanted = None if names is None else normalize_names(names)
    return s.add_watch(resource_type(Cluster), wanted, EventBuffer(100), None, now)


@st.composite
def _response(draw: st.DrawFn, index: int) -> DeltaDiscoveryResponse:
    r = DeltaDiscoveryResponse(type_url=CLUSTER, nonce=f"n{index}", system_version_info=f"v{index}")
    for _ in range(draw(st.sampled_from([1, 1, 1, 1, 0, 2]))):
        name = draw(st.sampled_from(["a", "b", "c", "a", ""]))
        res = r.resources.add(name=name, version=draw(st.sampled_from(["1", "2"])))
        kind = draw(st.sampled_from(["good", "good", "same", "bad", "invalid", "none"]))
        if kind == "bad":
            res.resource.type_url = CLUSTER
            res.resource.value = b"\xff\xff\xff"
        elif kind == "invalid":
            cluster = Cluster(name=name)
            cluster.connect_timeout.seconds = -1  # (validate.rules): must be > 0s
            res.resource.Pack(cluster)
        elif kind != "none":
            tag = "same" if kind == "same" else f"t{index}"
            res.resource.Pack(Cluster(name=name, alt_stat_name=tag))
        if draw(st.integers(0, 5)) == 0:
            res.aliases.append("alias")
        if draw(st.integers(0, 5)) == 0:
            res.ttl.seconds = draw(st.sampled_from([3, 30]))  # a timer that may come first
    if draw(st.integers(0, 6)) == 0:
        r.removed_resources.append(draw(st.sampled_from(["a", "b", "c"])))
    return r


def _events(entry: WatchEntry[Any]) -> list[Any]:
    return list(iter(entry.buffer.pop, None))


def _states(s: Session) -> Any:
    (slot,) = s._slots.values()
    return (
        sorted((st.name, st.status, st.error) for st in slot.protocol.resource_states(CLUSTER)),
        len(slot.stream.in_flight),
        slot.stream.holding,
        s.next_wakeup(),
    )


@settings(max_examples=150, deadline=None)
@given(
    hold=st.booleans(),
    timeout=st.sampled_from([None, 5.0]),
    watches=st.lists(st.sampled_from(_WATCHES), min_size=1, max_size=3),
    data=st.data(),
)
def test_a_session_with_metrics_hooks_does_what_one_without_does(
    hold: bool, timeout: float | None, watches: list[Any], data: st.DataObject
) -> None:
    sessions = [_session(metrics, does_not_exist_timeout=timeout) for metrics in (False, True)]
    entries = [[_watch(s, w, 0.0) for w in watches] for s in sessions]
    now = 0.0
    opened: list[OpenStream] = []
    for s in sessions:
        actions = s.step(now)
        (o,) = [a for a in actions if isinstance(a, OpenStream)]
        opened.append(o)
        for a in actions:
            if isinstance(a, SendRequest):
                s.on_written(o.slot, o.attempt, now)
    for index in range(data.draw(st.integers(1, 10))):
        now += 1.0
        step = data.draw(st.sampled_from(["response"] * 6 + ["written", "release", "fail", "step"]))
        if step == "response":
            response = data.draw(_response(index))
            got = [s.receive(o.slot, o.attempt, response, now, hold=hold)
                   for s, o in zip(sessions, opened, strict=True)]  # fmt: skip
            # The buffers held (flow control) by the position of their watch.
            held = [
                [[e.buffer for e in es].index(b) for b in g.buffers]
                for g, es in zip(got, entries, strict=True)
            ]
            assert held[0] == held[1]
            assert [(g.replies, g.wake, g.delivered) for g in got] == [
                (got[1].replies, got[1].wake, got[1].delivered)
            ] * 2
        elif step == "written":
            pairs = zip(sessions, opened, strict=True)
            assert len({s.on_written(o.slot, o.attempt, now) for s, o in pairs}) == 1
        elif step == "release":
            got = [s.release(o.slot, o.attempt) for s, o in zip(sessions, opened, strict=True)]
            assert got[0] == got[1]
        elif step == "fail":
            for s, o in zip(sessions, opened, strict=True):
                s.on_failure(o.slot, o.attempt, ConnectionError("reset"), now)
        else:
            steps = [s.step(now) for s in sessions]
            assert [type(a).__name__ for a in steps[0]] == [type(a).__name__ for a in steps[1]]
            for i, acts in enumerate(steps):
                for act in acts:
                    if isinstance(act, OpenStream):
                        opened[i] = act
        assert [_events(e) for e in entries[0]] == [_events(e) for e in entries[1]]
        assert _states(sessions[0]) == _states(sessions[1])
