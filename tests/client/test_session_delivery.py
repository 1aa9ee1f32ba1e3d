"""Delivery in the session: every event reaches the watchers it names, by name or alias.

Sans-I/O: the session is driven by hand (no driver, no sockets, a fake clock).
"""

from __future__ import annotations

from typing import Any

from envoy.config.core.v3.base_pb2 import Node
from envoy.config.route.v3.route_components_pb2 import VirtualHost
from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryResponse

from xds_client import (
    Backoff,
    ConnectivityChanged,
    ResourceRemoved,
    ResourceUpdated,
    ServerTarget,
)
from xds_client.client._options import build_options
from xds_client.client._session import OpenStream, Session
from xds_client.client._watchers import EventBuffer, WatchEntry
from xds_client.resources import VIRTUAL_HOST, resource_type

ALIAS = "rc/alias.example"


def _session(**kwargs: Any) -> Session:
    kwargs.setdefault("backoff", Backoff(initial=1, multiplier=2, jitter=0, maximum=8))
    return Session(build_options(["p:1"], node=Node(id="n"), protocol="delta", **kwargs))


def _watch(s: Session, name: str) -> WatchEntry[Any]:
    return s.add_watch(resource_type(VIRTUAL_HOST), frozenset({name}), EventBuffer(100), None, 0.0)


def _kinds(entry: WatchEntry[Any]) -> list[str]:
    return [type(e).__name__ for e in iter(entry.buffer.pop, None)]


def test_a_watcher_by_alias_hears_of_the_removal() -> None:
    s = _session(does_not_exist_timeout=None)
    by_alias = _watch(s, ALIAS)
    (opened,) = [a for a in s.step(0.0) if isinstance(a, OpenStream)]
    update = DeltaDiscoveryResponse(type_url=VIRTUAL_HOST, nonce="1")
    res = update.resources.add(name="rc/vh1", version="1", aliases=[ALIAS])
    res.resource.Pack(VirtualHost(name="rc/vh1", domains=["alias.example"]))
    s.receive("ads", opened.attempt, update, 0.1)
    by_name = _watch(s, "rc/vh1")
    assert _kinds(by_alias) == ["ConnectivityChanged", "ResourceUpdated"]
    assert _kinds(by_name) == ["ResourceUpdated"]  # the replay of what is cached
    removal = DeltaDiscoveryResponse(type_url=VIRTUAL_HOST, nonce="2", removed_resources=["rc/vh1"])
    s.receive("ads", opened.attempt, removal, 0.2)
    gone = ResourceRemoved(VIRTUAL_HOST, "rc/vh1", "deleted", (ALIAS,))
    assert list(iter(by_name.buffer.pop, None)) == [gone]
    assert list(iter(by_alias.buffer.pop, None)) == [gone]


def test_a_watcher_by_alias_hears_of_a_ttl_expiry() -> None:
    s = _session(does_not_exist_timeout=None)
    by_alias = _watch(s, ALIAS)
    (opened,) = [a for a in s.step(0.0) if isinstance(a, OpenStream)]
    update = DeltaDiscoveryResponse(type_url=VIRTUAL_HOST, nonce="1")
    res = update.resources.add(name="rc/vh1", version="1", aliases=[ALIAS])
    res.resource.Pack(VirtualHost(name="rc/vh1", domains=["alias.example"]))
    res.ttl.seconds = 2
    s.receive("ads", opened.attempt, update, 0.0)
    events = list(iter(by_alias.buffer.pop, None))
    assert [type(e) for e in events] == [ConnectivityChanged, ResourceUpdated]
    s.step(3.0)  # the TTL ran out
    assert list(iter(by_alias.buffer.pop, None)) == [
        ResourceRemoved(VIRTUAL_HOST, "rc/vh1", "ttl_expired", (ALIAS,))
    ]


def test_a_watcher_by_alias_hears_of_a_data_error_drop() -> None:
    # gRFC A88: with the server's fail_on_data_errors, a bad update drops the cached value.
    s = Session(
        build_options(
            [ServerTarget("p:1", server_features=frozenset({"fail_on_data_errors"}))],
            node=Node(id="n"), protocol="delta", does_not_exist_timeout=None,
        )
    )  # fmt: skip
    by_alias = _watch(s, ALIAS)
    (opened,) = [a for a in s.step(0.0) if isinstance(a, OpenStream)]
    update = DeltaDiscoveryResponse(type_url=VIRTUAL_HOST, nonce="1")
    res = update.resources.add(name="rc/vh1", version="1", aliases=[ALIAS])
    res.resource.Pack(VirtualHost(name="rc/vh1", domains=["alias.example"]))
    s.receive("ads", opened.attempt, update, 0.0)
    list(iter(by_alias.buffer.pop, None))
    bad = DeltaDiscoveryResponse(type_url=VIRTUAL_HOST, nonce="2")
    res = bad.resources.add(name="rc/vh1", version="2", aliases=[ALIAS])
    res.resource.type_url = VIRTUAL_HOST
    res.resource.value = b"\xff\xff\xff"  # does not decode
    s.receive("ads", opened.attempt, bad, 1.0)
    events = list(iter(by_alias.buffer.pop, None))
    assert ResourceRemoved(VIRTUAL_HOST, "rc/vh1", "data_error", (ALIAS,)) in events
