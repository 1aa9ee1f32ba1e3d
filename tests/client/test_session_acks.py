"""The delta reader's ACKs in the session: write confirmations of ACKs cost no lock,
and the A57 accounting of the requests around them stays in order."""

from __future__ import annotations

import threading
from typing import Any

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryResponse

from xds_client import Backoff
from xds_client.client._options import build_options, normalize_names
from xds_client.client._session import OpenStream, SendRequest, Session
from xds_client.client._watchers import EventBuffer, WatchEntry
from xds_client.protocol import ResourceDoesNotExist
from xds_client.resources import CLUSTER, resource_type


def _session(**kwargs: Any) -> Session:
    kwargs.setdefault("backoff", Backoff(initial=1, multiplier=2, jitter=0, maximum=8))
    return Session(build_options(["p:1"], node=Node(id="n"), protocol="delta", **kwargs))


def _watch(s: Session, names: list[str], now: float = 0.0) -> WatchEntry[Any]:
    return s.add_watch(resource_type(Cluster), normalize_names(names), EventBuffer(100), None, now)


def _response(nonce: str, *names: str) -> DeltaDiscoveryResponse:
    r = DeltaDiscoveryResponse(type_url=CLUSTER, nonce=nonce, system_version_info=nonce)
    for name in names:
        res = r.resources.add(name=name, version=nonce)
        res.resource.Pack(Cluster(name=name))
    return r


def _open(s: Session, now: float = 0.0) -> tuple[OpenStream, list[SendRequest]]:
    actions = s.step(now)
    (opened,) = [a for a in actions if isinstance(a, OpenStream)]
    return opened, [a for a in actions if isinstance(a, SendRequest)]


def _missing(entry: WatchEntry[Any]) -> list[str]:
    return [e.name for e in iter(entry.buffer.pop, None) if isinstance(e, ResourceDoesNotExist)]


def test_an_ack_write_is_confirmed_without_the_session_lock() -> None:
    """gRPC's side of the stream confirms each ACK; it must not queue behind the
    reader applying the next response (a lock handoff per ACK)."""
    s = _session(does_not_exist_timeout=None)
    _watch(s, ["a"])
    opened, first = _open(s)
    for _ in first:
        s.on_written("ads", opened.attempt, 0.0)
    got = s.receive("ads", opened.attempt, _response("1", "a"), 1.0)
    assert len(got.replies) == 1
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with s.lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert held.wait(10)
        done: list[bool] = []
        confirm = threading.Thread(
            target=lambda: done.append(s.on_written("ads", opened.attempt, 1.0))
        )
        confirm.start()
        confirm.join(2.0)
        assert done == [False], "the ACK's confirmation waited for the session lock"
    finally:
        release.set()
        holder.join(10)


def test_requests_behind_acks_start_their_timers_on_their_own_confirmation() -> None:
    s = _session(does_not_exist_timeout=5)
    entry = _watch(s, ["a"])
    opened, first = _open(s)
    for _ in first:
        s.on_written("ads", opened.attempt, 0.0)
    s.receive("ads", opened.attempt, _response("1", "a"), 1.0)  # one ACK in flight
    _watch(s, ["b"])  # a subscription request queued behind the ACK
    sends = [a for a in s.step(2.0) if isinstance(a, SendRequest)]
    assert [list(a.request.resource_names_subscribe) for a in sends] == [["b"]]  # type: ignore[union-attr]
    assert s.next_wakeup() is None
    assert s.on_written("ads", opened.attempt, 3.0) is False  # the ACK: no timer
    assert s.next_wakeup() is None
    assert s.on_written("ads", opened.attempt, 4.0) is True  # "b": its timer starts now
    assert s.next_wakeup() == 9.0
    s.step(9.0)
    assert _missing(entry) == []  # the watcher of "a" has "a"
    assert s.on_written("ads", opened.attempt, 5.0) is False  # nothing left in flight


def test_a_late_confirmation_of_a_failed_stream_leaves_the_new_stream_alone() -> None:
    s = _session(does_not_exist_timeout=5)
    _watch(s, ["a"])
    old, _ = _open(s)
    s.receive("ads", old.attempt, _response("1", "a"), 0.5)  # first request + ACK in flight
    s.on_failure("ads", old.attempt, ConnectionError("reset"), 1.0)
    new, resent = _open(s, 1.0)
    assert new.attempt != old.attempt
    assert resent
    # The old stream's writes complete late: they must not take the new stream's place.
    for _ in range(3):
        assert s.on_written("ads", old.attempt, 1.5) is False
    assert s.next_wakeup() is None
    assert s.on_written("ads", new.attempt, 2.0) is False  # "a" is cached: no timer
    assert s.on_written("ads", new.attempt, 2.0) is False  # nothing else in flight
