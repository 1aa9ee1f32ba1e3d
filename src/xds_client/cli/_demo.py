"""``demo``: a live story of the xDS protocol, told by two clients.

An in-process control plane serves a listener, a route, clusters and
endpoints. One client speaks delta xDS, the other state-of-the-world; both
use ADS. The story changes, adds, breaks and removes resources, lets a TTL
run out and restarts the server, and prints what each client saw. Every step
waits for the clients (bounded), so the story is the same on a slow machine;
``--fast`` drops the pauses between steps (the tests use it).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from xds_client.client import Backoff, XdsClient
from xds_client.node import Node
from xds_client.testing import ControlPlane

from ._output import Output, format_table, kind_of, xds_records

__all__ = ["run_demo"]

CLIENTS = ("delta", "sotw")


@dataclass(frozen=True)
class Pace:
    """How long the story lingers; ``--fast`` shrinks everything."""

    pause: float  # between steps, so a reader can follow
    ttl: float  # TTL of the canary endpoints
    heartbeat: float  # control plane heartbeat interval (well under the TTL)
    down: float  # how long the server stays down in the restart step
    wait: float  # bound of every wait for the clients


NORMAL = Pace(pause=1.6, ttl=2.0, heartbeat=0.5, down=1.5, wait=20.0)
FAST = Pace(pause=0.0, ttl=0.8, heartbeat=0.2, down=0.3, wait=20.0)


class DemoError(Exception):
    """A step of the demo did not happen in time."""


class Story:
    """Prints the narration and every client event; lets steps wait for events."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.started = time.monotonic()
        self._cond = threading.Condition()
        self.records: list[tuple[str, dict[str, Any]]] = []
        self._link: dict[str, str] = {}

    def _stamp(self) -> str:
        return f"{time.monotonic() - self.started:5.1f}s"

    def step(self, title: str) -> None:
        with self._cond:
            self.out.line("")
            self.out.line(f"{self._stamp()}  == {title}")

    def say(self, text: str) -> None:
        with self._cond:
            self.out.line(f"{self._stamp()}     {text}")

    def listener(self, client: str) -> Callable[[object], None]:
        def on_event(event: object) -> None:
            for record in xds_records(event, with_resource=False):
                with self._cond:
                    if record["event"] in ("connected", "disconnected"):
                        # Every watch of the client hears about its one ADS stream: tell once.
                        if self._link.get(client) == record["event"]:
                            continue
                        self._link[client] = record["event"]
                    self.records.append((client, record))
                    self.out.line(f"{self._stamp()}     [{client:<5}] {_describe(record)}")
                    self._cond.notify_all()

        return on_event

    def mark(self) -> int:
        with self._cond:
            return len(self.records)

    def wait_each(
        self,
        since: int,
        what: str,
        match: Callable[[dict[str, Any]], bool],
        timeout: float,
        clients: tuple[str, ...] = CLIENTS,
    ) -> None:
        """Wait until each of ``clients`` has an event matching ``match`` after ``since``."""

        def done() -> bool:
            seen = {c for c, r in self.records[since:] if match(r)}
            return seen >= set(clients)

        with self._cond:
            if not self._cond.wait_for(done, timeout):
                seen = sorted({c for c, r in self.records[since:] if match(r)})
                raise DemoError(
                    f"{what}: not seen by every client in {timeout:g}s (seen by {seen})"
                )


def _short(version: str | None) -> str:
    if not version:
        return ""
    return version if len(version) <= 12 else version[:10] + ".."


def _describe(record: dict[str, Any]) -> str:
    event = record["event"]
    if event in ("connected", "disconnected"):
        error = record.get("error") or ""
        if error.startswith("/"):
            error = error.split(": ", 1)[-1]  # drop the method path and address
        tail = f" ({error})" if error else ""
        preposition = "to" if event == "connected" else "from"
        return f"{event} {preposition} {record['server']}{tail}"
    kind = kind_of(record["type_url"])
    text = f"{event:<15} {kind} {record['name']}"
    if record.get("version"):
        text += f"  version {_short(record['version'])}"
    if record.get("reason"):
        text += f"  reason {record['reason']}"
    if record.get("error"):
        error = " ".join(str(record["error"]).split())
        text += f"  error: {error[:90]}"
    return text


# ----------------------------------------------------------------- sample resources


def _listener(route: str) -> Message:
    manager = hcm_pb2.HttpConnectionManager(stat_prefix="ingress")
    manager.rds.route_config_name = route
    manager.rds.config_source.ads.SetInParent()
    listener = Listener(name="ingress")
    listener.api_listener.api_listener.Pack(manager)
    return listener


def _route(clusters: dict[str, int]) -> Message:
    route = RouteConfiguration(name="local-routes")
    host = route.virtual_hosts.add(name="shop", domains=["*"])
    entry = host.routes.add()
    entry.match.prefix = "/"
    for cluster, weight in clusters.items():
        entry.route.weighted_clusters.clusters.add(name=cluster).weight.value = weight
    return route


def _cluster(name: str, timeout_s: int = 1) -> Message:
    cluster = Cluster(name=name, type=Cluster.EDS, connect_timeout=Duration(seconds=timeout_s))
    cluster.eds_cluster_config.eds_config.ads.SetInParent()
    return cluster


def _endpoints(name: str, *addresses: tuple[str, int]) -> Message:
    assignment = ClusterLoadAssignment(cluster_name=name)
    locality = assignment.endpoints.add()
    locality.locality.zone = "zone-a"
    locality.load_balancing_weight.value = 1
    for host, port in addresses:
        socket = locality.lb_endpoints.add().endpoint.address.socket_address
        socket.address, socket.port_value = host, port
    return assignment


# ----------------------------------------------------------------- the story


def _is(
    event: str, kind: str | None = None, name: str | None = None, **more: str
) -> Callable[[dict[str, Any]], bool]:
    def match(record: dict[str, Any]) -> bool:
        if record["event"] != event:
            return False
        if kind is not None and kind_of(record["type_url"]) != kind:
            return False
        if name is not None and record["name"] != name:
            return False
        return all(record.get(k) == v for k, v in more.items())

    return match


@contextmanager
def _clients(cp: ControlPlane) -> Iterator[dict[str, XdsClient]]:
    # Fast reconnects keep the restart step short.
    backoff = Backoff(initial=0.2, maximum=1.0)
    with ExitStack() as stack:
        clients = {
            "delta": stack.enter_context(
                XdsClient(
                    cp.address,
                    node=Node(id="demo-delta", cluster="demo"),
                    protocol="delta",
                    backoff=backoff,
                )
            ),
            "sotw": stack.enter_context(
                XdsClient(
                    cp.address,
                    node=Node(id="demo-sotw", cluster="demo"),
                    protocol="sotw",
                    backoff=backoff,
                )
            ),
        }
        yield clients


def run_demo(args: argparse.Namespace, out: Output) -> int:
    """Tell the story; 0 when every step happened, 1 when one did not."""
    pace = FAST if args.fast else NORMAL
    story = Story(out)
    try:
        _tell(story, pace)
    except DemoError as exc:
        story.say(f"the demo stopped: {exc}")
        return 1
    story.step(f"demo finished in {time.monotonic() - story.started:.1f}s")
    return 0


def _tell(story: Story, pace: Pace) -> None:
    def pause(seconds: float = pace.pause) -> None:
        if seconds > 0:
            threading.Event().wait(seconds)  # reading time for a human, not a sync point

    wait = pace.wait
    story.step("Starting an xDS control plane in this process")
    with ControlPlane(heartbeat_interval=pace.heartbeat) as cp, ExitStack() as stack:
        cp.set_snapshot(
            {
                "lds": [_listener("local-routes")],
                "rds": [_route({"backend": 100})],
                "cds": [_cluster("backend"), _cluster("payments")],
                "eds": [
                    _endpoints("backend", ("10.0.0.1", 8080)),
                    _endpoints("payments", ("10.0.1.1", 8080)),
                ],
            }
        )
        story.say(f"listening on {cp.address}: listener 'ingress' -> route 'local-routes' ->")
        story.say("clusters 'backend' and 'payments' -> their endpoints (version 1)")
        pause()

        story.step("Two clients subscribe over ADS: one speaks delta xDS, one state-of-the-world")
        story.say("each watches every listener and cluster (wildcard), the route by name,")
        story.say("and the endpoints of the clusters it knows")
        clients = stack.enter_context(_clients(cp))
        watches: dict[str, dict[str, Any]] = {}
        mark = story.mark()
        for label, client in clients.items():
            on_event = story.listener(label)
            watches[label] = {
                "lds": client.watch("lds", None, on_event=on_event),
                "rds": client.watch("rds", "local-routes", on_event=on_event),
                "cds": client.watch("cds", None, on_event=on_event),
                "eds": client.watch("eds", ["backend", "payments"], on_event=on_event),
            }
            for watch in watches[label].values():
                stack.callback(watch.close)
        for kind, name in (
            ("LDS", "ingress"),
            ("RDS", "local-routes"),
            ("CDS", "backend"),
            ("CDS", "payments"),
            ("EDS", "backend"),
            ("EDS", "payments"),
        ):
            story.wait_each(mark, f"{kind} {name}", _is("updated", kind, name), wait)
        story.say("both hold all six resources. SotW versions are per response (version_info);")
        story.say("delta versions are per resource, chosen by the server")
        pause()

        story.step("Change: the endpoints of 'backend' move to a new address")
        mark = story.mark()
        cp.update("eds", [_endpoints("backend", ("10.0.0.2", 8080))])
        story.wait_each(mark, "EDS backend changed", _is("updated", "EDS", "backend"), wait)
        story.say("only the changed resource was sent to each client")
        pause()

        story.step("Add: a 'canary' cluster, and the route sends it 10% of the traffic")
        mark = story.mark()
        cp.set_snapshot(
            {
                "cds": [_cluster("backend"), _cluster("payments"), _cluster("canary")],
                "rds": [_route({"backend": 90, "canary": 10})],
                "eds": [
                    _endpoints("backend", ("10.0.0.2", 8080)),
                    _endpoints("payments", ("10.0.1.1", 8080)),
                    _endpoints("canary", ("10.0.2.1", 8080)),
                ],
            }
        )
        story.wait_each(mark, "CDS canary", _is("updated", "CDS", "canary"), wait)
        story.say("the clients follow the new cluster to its endpoints: a new EDS watch")
        for label, client in clients.items():
            watches[label]["canary"] = client.watch("eds", "canary", on_event=story.listener(label))
        story.wait_each(mark, "EDS canary", _is("updated", "EDS", "canary"), wait)
        story.wait_each(mark, "RDS local-routes", _is("updated", "RDS", "local-routes"), wait)
        pause()

        story.step("NACK: the server sends a cluster whose bytes do not parse")
        mark = story.mark()
        cp.update("cds", {"broken": b"\xff\xff\xff not a cluster"})
        story.wait_each(mark, "NACK of the broken cluster", _is("nacked", "CDS"), wait)
        story.say("each client NACKs (the error goes back to the server) and keeps what it had")
        cp.remove("cds", ["broken"])
        pause()

        story.step("Remove: the 'payments' cluster is deleted")
        mark = story.mark()
        cp.remove("cds", ["payments"])
        cp.remove("eds", ["payments"])
        story.wait_each(
            mark, "CDS payments removed", _is("removed", "CDS", "payments", reason="deleted"), wait
        )
        story.wait_each(
            mark,
            "EDS payments removed",
            _is("removed", "EDS", "payments"),
            wait,
            clients=("delta",),
        )
        story.say("delta says so in removed_resources; SotW by leaving it out of the full")
        story.say("set of clusters. SotW endpoint responses are not full sets, so the sotw")
        story.say("client keeps the 'payments' endpoints until it stops watching them")
        pause()

        story.step(
            f"TTL: the canary endpoints now live {pace.ttl:g}s unless heartbeats refresh them"
        )
        mark = story.mark()
        cp.update("eds", [_endpoints("canary", ("10.0.2.1", 8081))], ttl=pace.ttl)
        story.wait_each(mark, "EDS canary with a TTL", _is("updated", "EDS", "canary"), wait)
        story.say(
            f"the server sends a heartbeat every {pace.heartbeat:g}s; now it stops sending them"
        )
        pause(max(pace.pause, pace.ttl))
        # `mark` stays the one from before the update: on a starved machine a late
        # heartbeat may let the TTL run out before this point, which is still the story.
        cp.stop_heartbeats()
        story.wait_each(
            mark, "EDS canary expired", _is("removed", "EDS", "canary", reason="ttl_expired"), wait
        )
        story.say("no heartbeat within the TTL: each client dropped the resource by itself")
        for label in CLIENTS:
            watches[label].pop("canary").close()
        cp.remove("eds", ["canary"])
        pause()

        story.step("Restart: the control plane goes down, and changes 'backend' meanwhile")
        mark = story.mark()
        cp.stop_serving()
        story.wait_each(mark, "disconnection", _is("disconnected"), wait)
        story.say("the clients keep their cached resources and retry with backoff")
        cp.update("cds", [_cluster("backend", timeout_s=5)])
        pause(pace.down)
        mark = story.mark()
        cp.resume_serving()
        story.wait_each(mark, "reconnection", _is("connected"), wait)
        story.wait_each(
            mark, "CDS backend after the restart", _is("updated", "CDS", "backend"), wait
        )
        story.say("delta resumed with initial_resource_versions, so only 'backend' came again;")
        story.say("SotW asked again for everything and learnt what changed")
        pause()

        story.step("What each client holds now")
        for label, client in clients.items():
            rows = []
            for alias in ("lds", "rds", "cds", "eds"):
                for name, cached in sorted(client.resources(alias).items()):
                    rows.append((alias.upper(), name, _short(cached.version)))
            story.out.line(f"  {label} client:")
            for line in format_table(("TYPE", "NAME", "VERSION"), rows).splitlines():
                story.out.line("    " + line)
        counts: dict[str, int] = {}
        for _, record in story.records:
            counts[record["event"]] = counts.get(record["event"], 0) + 1
        story.say("events seen: " + ", ".join(f"{n} {e}" for e, n in sorted(counts.items())))
