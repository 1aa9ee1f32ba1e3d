"""Fault soak: clients against a ControlPlane while faults are injected.

``python tools/soak.py --faults 200`` (``make soak``) runs six clients at once:
XdsClient and AsyncXdsClient, each over SotW and delta, against an in-process
ControlPlane behind a :class:`~xds_client.testing.FaultProxy`, and one of each
against a control plane in another process (``xds-client serve``, fed the same
clusters through its resource file). Each client has a callback watcher (raising
on purpose after some faults) and the sync in-process ones also have a slow pull
watcher. The loop changes the server's clusters, then injects one fault (every
kind once first, in random order, then at random):

- a stream dropped mid-session (UNAVAILABLE);
- a connection cut in the middle of a response (half a DATA frame, then nothing);
- SIGKILL of the server process, restarted on the same port;
- the server stopping (its gRPC server sends GOAWAY) and coming back;
- the next streams failing;
- a malformed response (bytes that are no DiscoveryResponse);
- a response with a duplicate resource name;
- a response with a resource of the wrong type_url;
- a resource that breaks its proto's (validate.rules);
- a slow consumer (the pull watchers stop reading for a while);
- a raising callback.

At the end every watcher's view must equal the server's state. Nothing may be
missing or stale ("lost"), and no update may repeat the bytes the watcher already
has ("duplicated"), except once after an error of it (a NACK, a server-reported
error) to say that the error is over; the slow readers, whose buffers fold, are
checked for losses only. The last line says ``N faults, L lost, D duplicated``; the
exit status is 1 unless both are 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryResponse,
    DiscoveryResponse,
    Resource,
)
from google.protobuf import json_format

from xds_client import (
    AsyncXdsClient,
    Backoff,
    ClientClosedError,
    Node,
    WaitTimeoutError,
    XdsClient,
)
from xds_client.protocol import (
    ResourceDoesNotExist,
    ResourceErrorReported,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
)
from xds_client.resources import CLUSTER
from xds_client.testing import ControlPlane, FaultProxy

NAMES = [f"c{i:02d}" for i in range(12)]
FAULTS = (
    "drop", "cut", "sigkill", "restart", "fail_new", "garbage", "duplicate", "wrong_type",
    "invalid", "slow", "raise",
)  # fmt: skip


class View:
    """What one watcher has seen: name -> serialized bytes."""

    def __init__(self, label: str, *, folds: bool = False) -> None:
        self.label = label
        self.folds = folds
        """A slow reader's buffer folds to the latest event per key: a later NACK of the
        type replaces the one that an "error over" update answers, so that update can
        arrive first. Such a reader is checked for losses, not for repeats."""
        self.lock = threading.Lock()
        self.held: dict[str, bytes] = {}
        self.duplicated = 0
        self.in_error: set[str] = set()
        """Names the watcher was told are in error (a NACK, a server-reported error)."""
        self.raising = False
        self.raised = 0

    def apply(self, event: Any) -> None:
        with self.lock:
            if isinstance(event, ResourceUpdated):
                data = event.resource.SerializeToString()
                # The kept bytes come once more to say that an error of them is over.
                if (
                    self.held.get(event.name) == data
                    and event.name not in self.in_error
                    and not self.folds
                ):
                    self.duplicated += 1
                self.in_error.discard(event.name)
                self.held[event.name] = data
            elif isinstance(event, (ResourceRemoved, ResourceDoesNotExist)):
                self.held.pop(event.name, None)
                self.in_error.discard(event.name)
            elif isinstance(event, ResponseRejected):
                named = {key for key in event.errors if key in self.held}
                whole = len(named) < len(event.errors)  # "(response)", "resources[i]"
                self.in_error |= set(self.held) if whole else named
            elif isinstance(event, ResourceErrorReported):
                self.in_error.add(event.name)

    def on_event(self, event: Any) -> None:
        self.apply(event)
        if self.raising and isinstance(event, ResourceUpdated):
            self.raised += 1
            raise RuntimeError("soak: a callback that raises")

    def lost(self, truth: dict[str, bytes]) -> list[str]:
        with self.lock:
            names = set(truth) | set(self.held)
            return sorted(n for n in names if self.held.get(n) != truth.get(n))


class ServerProcess:
    """``xds-client serve`` in a subprocess, serving a resource file it reloads."""

    def __init__(self, directory: Path) -> None:
        self.file = directory / "clusters.json"
        self.log = (directory / "serve.log").open("ab")
        with socket.socket() as probe:  # a free port, kept across restarts
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.kills = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def write(self, clusters: list[Cluster], version: str) -> None:
        resources = []
        for message in clusters:
            entry = json_format.MessageToDict(message)
            entry["@type"] = CLUSTER
            resources.append(entry)
        temporary = self.file.with_suffix(".tmp")
        temporary.write_text(json.dumps({"version_info": version, "resources": resources}))
        os.replace(temporary, self.file)  # a new file at once: never read half-written

    def start(self) -> None:
        command = [sys.executable, "-m", "xds_client", "serve", "--resources", str(self.file),
                   "--port", str(self.port), "--reload-interval", "0.05"]  # fmt: skip
        self.proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log
        )

    def wait_serving(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return True
            except OSError:
                time.sleep(0.05)
        return False

    def kill_and_restart(self) -> None:
        """SIGKILL (no GOAWAY, no goodbye), then a new process on the same port."""
        proc = self.proc
        if proc is not None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            self.kills += 1
        self.start()  # clients back off and reconnect once it listens

    def close(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.log.close()


def cluster(name: str, revision: int) -> Cluster:
    made = Cluster(name=name, alt_stat_name=f"{name}-r{revision}")
    made.connect_timeout.seconds = 1 + revision % 5
    return made


class Soak:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.cp = ControlPlane(rest_port=None, heartbeat_interval=None).start()
        self.proxy = FaultProxy(self.cp.address)
        self.workdir = tempfile.TemporaryDirectory(prefix="xds-soak-")
        self.process = ServerProcess(Path(self.workdir.name))
        self.revision = 0
        self.truth: dict[str, Cluster] = {}
        self.views: list[View] = []
        self.slow_views: list[tuple[View, Any]] = []
        self.slow_paused = threading.Event()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.clients: list[XdsClient] = []
        self.counts: Counter[str] = Counter()

    # ------------------------------------------------------------ clients

    def options(self, protocol: str) -> dict[str, Any]:
        return {
            "node": Node(id=f"soak-{protocol}"),
            "protocol": protocol,
            "backoff": Backoff(initial=0.05, maximum=0.3),
            "does_not_exist_timeout": None,
            "queue_size": 8,  # small, so the slow consumer coalesces
        }

    def start_clients(self) -> None:
        # The server in another process: one client of each kind, one protocol each.
        remote = XdsClient(self.process.address, **self.options("sotw"))
        self.clients.append(remote)
        remote_view = View("XdsClient sotw, server process")
        self.views.append(remote_view)
        remote.watch(Cluster, on_event=remote_view.on_event)
        remote_async = View("AsyncXdsClient delta, server process")
        self.views.append(remote_async)
        runner = threading.Thread(
            target=asyncio.run,
            args=(self.run_async("delta", remote_async, self.process.address),),
            daemon=True,
        )
        runner.start()
        self.threads.append(runner)
        for protocol in ("sotw", "delta"):
            client = XdsClient(self.proxy.address, **self.options(protocol))
            self.clients.append(client)
            view = View(f"XdsClient {protocol} callback")
            self.views.append(view)
            client.watch(Cluster, on_event=view.on_event)
            slow = View(f"XdsClient {protocol} slow reader", folds=True)
            watch = client.watch(Cluster)
            self.slow_views.append((slow, watch))
            reader = threading.Thread(target=self.read_slowly, args=(slow, watch), daemon=True)
            reader.start()
            self.threads.append(reader)
            view_async = View(f"AsyncXdsClient {protocol} callback")
            self.views.append(view_async)
            runner = threading.Thread(
                target=asyncio.run,
                args=(self.run_async(protocol, view_async, self.proxy.address),),
                daemon=True,
            )
            runner.start()
            self.threads.append(runner)

    def read_slowly(self, view: View, watch: Any) -> None:
        while not self.stop.is_set():
            if self.slow_paused.is_set():
                time.sleep(0.02)
                continue
            try:
                event = watch.get(timeout=0.1)
            except WaitTimeoutError:
                continue
            except ClientClosedError:
                return
            view.apply(event)

    async def run_async(self, protocol: str, view: View, address: str) -> None:
        async with AsyncXdsClient(address, **self.options(protocol)) as client:
            client.watch(Cluster, on_event=view.on_event)
            while not self.stop.is_set():
                await asyncio.sleep(0.05)

    # ------------------------------------------------------------ server state

    def mutate(self) -> None:
        self.revision += 1
        rng = self.rng
        for name in rng.sample(NAMES, rng.randint(1, 4)):
            if name in self.truth and rng.random() < 0.15:
                del self.truth[name]
            else:
                self.truth[name] = cluster(name, self.revision)
        self.cp.set_resources(CLUSTER, list(self.truth.values()))
        self.process.write(list(self.truth.values()), f"r{self.revision}")

    def truth_bytes(self) -> dict[str, bytes]:
        return {n: c.SerializeToString() for n, c in self.truth.items()}

    # ------------------------------------------------------------ faults

    def raw_sotw(self, extra: list[Any], version: str) -> DiscoveryResponse:
        """The whole truth (CDS is full state) plus ``extra``."""
        response = DiscoveryResponse(type_url=CLUSTER, version_info=version)
        for message in self.truth.values():
            response.resources.add().Pack(message)
        for message in extra:
            response.resources.add().Pack(message)
        return response

    def raw_delta(self, extra: list[tuple[str, Any]]) -> DeltaDiscoveryResponse:
        response = DeltaDiscoveryResponse(type_url=CLUSTER, system_version_info="raw")
        for name, message in extra:
            resource = Resource(name=name, version=f"raw-{self.revision}")
            resource.resource.Pack(message)
            response.resources.append(resource)
        return response

    def inject(self, kind: str) -> None:
        cp = self.cp
        some = next(iter(self.truth.values()), cluster("c00", self.revision))
        if kind == "drop":
            cp.drop_streams()
        elif kind == "cut":
            self.proxy.cut_next_response(2)
            self.mutate()  # a response to cut
        elif kind == "sigkill":
            self.process.kill_and_restart()
        elif kind == "restart":
            cp.stop_serving()
            time.sleep(0.05)
            cp.resume_serving()
        elif kind == "fail_new":
            cp.drop_streams()
            cp.fail_streams(grpc.StatusCode.UNAVAILABLE, count=2)
        elif kind == "garbage":
            cp.send_raw(b"\xff\xff\xff\xff")
        elif kind == "duplicate":
            cp.send_raw(self.raw_sotw([some], f"dup-{self.revision}"))
            cp.send_raw(self.raw_delta([(some.name, some), (some.name, some)]))
        elif kind == "wrong_type":
            cp.send_raw(self.raw_sotw([Listener(name="not-a-cluster")], f"wt-{self.revision}"))
            cp.send_raw(self.raw_delta([(some.name, Listener(name=some.name))]))
        elif kind == "invalid":
            bad = Cluster()
            bad.CopyFrom(some)
            bad.connect_timeout.seconds = -1
            response = self.raw_sotw([], f"bad-{self.revision}")
            del response.resources[:]
            for message in self.truth.values():
                response.resources.add().Pack(bad if message.name == bad.name else message)
            cp.send_raw(response)
            cp.send_raw(self.raw_delta([(bad.name, bad)]))
        elif kind == "slow":
            self.slow_paused.set()
            time.sleep(0.3)
            self.slow_paused.clear()
        elif kind == "raise":
            for view in self.views:
                view.raising = not view.raising
        self.counts[kind] += 1

    # ------------------------------------------------------------ run

    def settle(self, timeout: float) -> int:
        """Wait until every view equals the server's state; the names still off."""
        truth = self.truth_bytes()
        deadline = time.monotonic() + timeout
        while True:
            off = sum(len(v.lost(truth)) for v in self.all_views())
            if off == 0 or time.monotonic() > deadline:
                return off
            time.sleep(0.05)

    def all_views(self) -> list[View]:
        return self.views + [view for view, _ in self.slow_views]

    def schedule(self, faults: int) -> list[str]:
        """Every kind once (in random order) while there is room, then at random."""
        first = list(FAULTS)
        self.rng.shuffle(first)
        rest = [self.rng.choice(FAULTS) for _ in range(max(0, faults - len(first)))]
        return (first + rest)[:faults]

    def run(self, faults: int) -> tuple[int, int, int]:
        self.mutate()
        self.process.start()
        if not self.process.wait_serving(30.0):
            print("the server process did not start; see its log", file=sys.stderr)
        self.start_clients()
        first = self.settle(30.0)
        if first:
            print(f"clients did not sync before the faults ({first} names off)", file=sys.stderr)
        for kind in self.schedule(faults):
            self.mutate()
            self.inject(kind)
            time.sleep(self.rng.uniform(0.02, 0.12))
        for view in self.views:
            view.raising = False
        self.cp.clear_faults()
        self.mutate()  # one last change, so a full state goes out after the last fault
        lost = self.settle(30.0)
        truth = self.truth_bytes()
        for view in self.all_views():
            missing = view.lost(truth)
            if missing:
                print(f"{view.label}: off {missing}", file=sys.stderr)
        duplicated = sum(v.duplicated for v in self.all_views())
        return sum(self.counts.values()), lost, duplicated

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:  # readers and async runners see stop and end
            thread.join(timeout=10)
        for client in self.clients:
            client.close()
        self.proxy.close()
        self.cp.close()
        self.process.close()
        self.workdir.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/soak.py", description=__doc__)
    parser.add_argument("--faults", type=int, default=200, help="faults to inject")
    parser.add_argument("--seed", type=int, default=13, help="random seed")
    args = parser.parse_args(argv)
    started = time.monotonic()
    soak = Soak(args.seed)
    try:
        faults, lost, duplicated = soak.run(args.faults)
    finally:
        soak.close()
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(soak.counts.items()))
    print(
        "6 clients (XdsClient, AsyncXdsClient x SotW, delta behind a FaultProxy; "
        f"SotW and delta against a server process), 8 watchers; {kinds}"
    )
    print(
        f"{soak.proxy.cuts} responses cut mid-frame, {soak.process.kills} server processes "
        f"killed; {time.monotonic() - started:.1f} s"
    )
    print(f"{faults} faults, {lost} lost, {duplicated} duplicated")
    return 0 if lost == 0 and duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
