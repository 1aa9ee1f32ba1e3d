"""The watch driver with a fake client: how many client watches a graph costs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from xds_client.graph import ConfigSnapshot
from xds_client.graph._follower import _Follower
from xds_client.protocol._events import ResourceUpdated

from ._graph_resources import api_listener, eds_cluster, endpoints, routes


class FakeWatch:
    def __init__(self, kind: str, names: list[str], on_event: Callable[[object], None]) -> None:
        self.kind, self.names, self.on_event = kind, names, on_event
        self.pending = 0
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def burst(self, events: list[object]) -> None:
        """Deliver events as a client's dispatcher drains a buffer: ``pending`` counts
        what is still queued behind the event being handled."""
        for index, event in enumerate(events):
            self.pending = len(events) - index - 1
            self.on_event(event)
        self.pending = 0


class FakeClient:
    def __init__(self) -> None:
        self.watches: list[FakeWatch] = []
        self.closed = False

    def watch(self, kind: str, names: Any = None, *, on_event: Any = None) -> FakeWatch:
        watch = FakeWatch(kind, list(names), on_event)
        self.watches.append(watch)
        return watch

    def open(self, kind: str) -> list[FakeWatch]:
        return [w for w in self.watches if w.kind == kind and not w.closed]


def updated(name: str, message: Message, version: str = "1") -> ResourceUpdated[Any]:
    return ResourceUpdated("T", name, version, message)


def test_a_burst_of_clusters_opens_one_endpoint_watch() -> None:
    client = FakeClient()
    snapshots: list[ConfigSnapshot] = []
    follower = _Follower(client, "L1", 16, snapshots.append)
    names = [f"c{i}" for i in range(100)]
    [lds] = client.open("lds")
    lds.burst([updated("L1", api_listener("L1", "R1"))])
    [rds] = client.open("rds")
    rds.burst([updated("R1", routes("R1", *names))])
    [cds] = client.open("cds")
    assert sorted(cds.names) == sorted(names)  # one watch for the 100 clusters
    cds.burst([updated(n, eds_cluster(n)) for n in names])
    [eds] = client.open("eds")  # ... and one for their 100 endpoint resources
    assert sorted(eds.names) == sorted(names)
    eds.burst([updated(n, endpoints(n, 1)) for n in names])
    assert len(snapshots) == 1
    assert len(snapshots[0].endpoints) == 100

    # Dropping half the routes moves the other half to a new watch, opened first.
    rds.burst([updated("R1", routes("R1", *names[:50]), version="2")])
    [cds2] = client.open("cds")
    assert cds.closed
    assert sorted(cds2.names) == sorted(names[:50])
    [eds2] = client.open("eds")
    assert sorted(eds2.names) == sorted(names[:50])
    assert len(snapshots) == 2
    assert len(snapshots[1].clusters) == 50
    # A late event of the closed watch changes nothing.
    cds.burst([updated("c1", eds_cluster("c1", "other"), version="9")])
    assert len(snapshots) == 2
    follower.close()
    assert all(w.closed for w in client.watches)


def test_a_burst_of_endpoint_updates_builds_one_snapshot() -> None:
    """A snapshot costs the whole graph: one per event made a response of N changed
    endpoints cost N graphs (quadratic in the number of clusters, #31)."""
    client = FakeClient()
    snapshots: list[ConfigSnapshot] = []
    _Follower(client, "L1", 16, snapshots.append)
    names = [f"c{i}" for i in range(100)]
    client.open("lds")[0].burst([updated("L1", api_listener("L1", "R1"))])
    client.open("rds")[0].burst([updated("R1", routes("R1", *names))])
    client.open("cds")[0].burst([updated(n, eds_cluster(n)) for n in names])
    [eds] = client.open("eds")
    eds.burst([updated(n, endpoints(n, 1)) for n in names])
    [first] = snapshots

    eds.burst([updated(n, endpoints(n, 2), version="2") for n in names])
    assert len(snapshots) == 2
    second = snapshots[1]
    assert all(port_of(second.endpoints[n]) == 2 for n in names)
    assert all(port_of(first.endpoints[n]) == 1 for n in names)  # snapshots stay as built
    # One more update patches a fresh copy: the second snapshot stays as built too.
    eds.burst([updated("c0", endpoints("c0", 3), version="3")])
    assert (port_of(snapshots[2].endpoints["c0"]), port_of(second.endpoints["c0"])) == (3, 2)
    assert snapshots[2].generation == 3


def port_of(assignment: Message) -> int:
    lb = assignment.endpoints[0].lb_endpoints[0]  # type: ignore[attr-defined]
    port: int = lb.endpoint.address.socket_address.port_value
    return port
