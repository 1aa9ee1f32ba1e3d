"""The benchmark servers, run in their own process so the client's CPU is its own.

One process serves ADS (SotW and delta) with prebuilt, pre-serialized
responses, so the server costs the same for the SDK and the raw loop and
barely shows in the timings, and it hosts the SQLite ``ResourceStoreServer``.
The parent drives it over a pipe: every command gets exactly one reply, in
order, so a parent may send a command, do its client work, then read the reply.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc

ADS = "envoy.service.discovery.v3.AggregatedDiscoveryService"
_MAX_MESSAGE = 512 * 1024 * 1024
_ACK_TIMEOUT = 30.0
_POLL = 0.2


@dataclass(eq=False)
class _Stream:
    kind: str
    jobs: queue.SimpleQueue[tuple[Any, ...]] = field(default_factory=queue.SimpleQueue)
    acks: queue.SimpleQueue[str] = field(default_factory=queue.SimpleQueue)
    first: threading.Event = field(default_factory=threading.Event)
    first_at: float = 0.0
    first_versions: int = 0
    requests: int = 0


class _Ads:
    """Generic ADS handlers that send whatever bytes the parent prepared."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.streams: list[_Stream] = []
        self.prepared: dict[str, list[bytes]] = {}
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.stopping = threading.Event()

    def handler(self) -> grpc.GenericRpcHandler:
        from envoy.service.discovery.v3.discovery_pb2 import (
            DeltaDiscoveryRequest,
            DiscoveryRequest,
        )

        def sotw(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[bytes]:
            return self._serve("sotw", requests, context)

        def delta(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[bytes]:
            return self._serve("delta", requests, context)

        def ident(data: bytes) -> bytes:
            return data

        return grpc.method_handlers_generic_handler(
            ADS,
            {
                "StreamAggregatedResources": grpc.stream_stream_rpc_method_handler(
                    sotw, DiscoveryRequest.FromString, ident
                ),
                "DeltaAggregatedResources": grpc.stream_stream_rpc_method_handler(
                    delta, DeltaDiscoveryRequest.FromString, ident
                ),
            },
        )

    def _read(self, stream: _Stream, requests: Iterator[Any]) -> None:
        try:
            for request in requests:
                stream.requests += 1
                if not stream.first.is_set():
                    stream.first_at = time.perf_counter()
                    if stream.kind == "delta":
                        stream.first_versions = len(request.initial_resource_versions)
                    stream.first.set()
                elif request.response_nonce:
                    stream.acks.put(request.response_nonce)
        except Exception:
            pass

    def _serve(
        self, kind: str, requests: Iterator[Any], context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        stream = _Stream(kind)
        with self.lock:
            self.streams.append(stream)
        reader = threading.Thread(target=self._read, args=(stream, requests), daemon=True)
        reader.start()
        while not self.stopping.is_set() and context.is_active():
            try:
                job = stream.jobs.get(timeout=_POLL)
            except queue.Empty:
                continue
            what = job[0]
            if what == "send":
                yield from self.prepared[job[1]]
            elif what == "lockstep":
                sent: list[float] = []
                for data in self.prepared[job[1]]:
                    sent.append(time.perf_counter())
                    yield data
                    try:
                        stream.acks.get(timeout=_ACK_TIMEOUT)
                    except queue.Empty:
                        break
                self.results.put(sent)
            elif what == "firehose":  # every response at once; ACKs are read, not awaited
                sent = []
                for data in self.prepared[job[1]]:
                    sent.append(time.perf_counter())
                    yield data
                self.results.put(sent)
            elif what == "abort":
                self.results.put(time.perf_counter())
                context.abort(grpc.StatusCode.UNAVAILABLE, "bench: stream dropped")
            else:
                return

    def latest(self, kind: str) -> _Stream:
        with self.lock:
            for stream in reversed(self.streams):
                if stream.kind == kind:
                    return stream
        raise LookupError(f"no {kind} stream")

    def wait_streams(self, kind: str, count: int, timeout: float) -> _Stream:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                ready = [s for s in self.streams if s.kind == kind and s.first.is_set()]
            if len(ready) >= count:
                return ready[-1]
            time.sleep(0.001)
        raise TimeoutError(f"{kind}: {count} streams did not open within {timeout}s")


def _sotw_response(version: str, nonce: str, clusters: list[bytes]) -> bytes:
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

    from bench._data import CDS

    response = DiscoveryResponse(version_info=version, type_url=CDS, nonce=nonce)
    for raw in clusters:
        response.resources.add(type_url=CDS, value=raw)
    return response.SerializeToString()


def _delta_response(nonce: str, items: list[tuple[str, str, bytes]]) -> bytes:
    from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryResponse

    from bench._data import CDS

    response = DeltaDiscoveryResponse(type_url=CDS, nonce=nonce, system_version_info=nonce)
    for name, version, raw in items:
        res = response.resources.add(name=name, version=version)
        res.resource.type_url = CDS
        res.resource.value = raw
    return response.SerializeToString()


class _Worker:
    """Runs the parent's commands in the server process."""

    def __init__(self) -> None:
        self.ads = _Ads()
        self.server = grpc.server(
            ThreadPoolExecutor(max_workers=16),
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE),
                ("grpc.max_send_message_length", _MAX_MESSAGE),
            ],
        )
        self.server.add_generic_rpc_handlers([self.ads.handler()])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.store: Any = None
        self._clusters: dict[tuple[int, int], bytes] = {}
        self._nonce = 0

    def cluster(self, i: int, revision: int) -> bytes:
        from bench._data import make_cluster

        key = (i, revision)
        raw = self._clusters.get(key)
        if raw is None:
            raw = self._clusters[key] = make_cluster(i, revision).SerializeToString()
        return raw

    def nonce(self) -> str:
        self._nonce += 1
        return str(self._nonce)

    # ------------------------------------------------------------ commands

    def prepare_sotw(self, n: int, changed: int, prefix: str = "sotw") -> dict[str, int]:
        """'<prefix>_full': n clusters at revision 0; '<prefix>_changed': ``changed`` at 1."""
        full = [self.cluster(i, 0) for i in range(n)]
        step = max(1, n // max(changed, 1))
        changed_idx = set(range(0, n, step)[:changed])
        again = [self.cluster(i, 1 if i in changed_idx else 0) for i in range(n)]
        self.ads.prepared[f"{prefix}_full"] = [_sotw_response("1", self.nonce(), full)]
        if changed:
            self.ads.prepared[f"{prefix}_changed"] = [_sotw_response("2", self.nonce(), again)]
        return {"bytes": len(self.ads.prepared[f"{prefix}_full"][0])}

    def forget(self, prefix: str) -> None:
        """Drop the prepared responses whose name starts with ``prefix`` (memory)."""
        for name in [name for name in self.ads.prepared if name.startswith(prefix)]:
            del self.ads.prepared[name]

    def prepare_lockstep(self, n: int, names: int) -> None:
        """'lockstep': n single-resource delta responses, versions 0..n-1, over ``names`` names."""
        from bench._data import cluster_name, make_cluster

        self.ads.prepared["lockstep"] = [
            _delta_response(
                self.nonce(),
                [(cluster_name(i % names), str(i), make_cluster(i, i).SerializeToString())],
            )
            for i in range(n)
        ]

    def prepare_bulk(self, n: int, batch: int) -> None:
        """'bulk': n delta resources (versions "1") in responses of ``batch``."""
        from bench._data import cluster_name

        out = []
        for start in range(0, n, batch):
            items = [
                (cluster_name(i), "1", self.cluster(i, 0))
                for i in range(start, min(n, start + batch))
            ]
            out.append(_delta_response(self.nonce(), items))
        self.ads.prepared["bulk"] = out

    def run(self, conn: multiprocessing.connection.Connection) -> None:
        conn.send(self.port)
        while True:
            try:
                command, args = conn.recv()
            except EOFError:
                return
            if command == "quit":
                conn.send(None)
                return
            try:
                reply = self.dispatch(command, args)
            except Exception as exc:
                reply = RuntimeError(f"{command}: {type(exc).__name__}: {exc}")
            conn.send(reply)

    def dispatch(self, command: str, args: tuple[Any, ...]) -> Any:
        ads = self.ads
        if command == "prepare_sotw":
            return self.prepare_sotw(*args)
        if command == "prepare_lockstep":
            return self.prepare_lockstep(*args)
        if command == "prepare_bulk":
            return self.prepare_bulk(*args)
        if command == "wait_streams":
            stream = ads.wait_streams(*args)
            return {"first_at": stream.first_at, "first_versions": stream.first_versions}
        if command == "send":  # kind, prepared name: returns at once
            ads.latest(args[0]).jobs.put(("send", args[1]))
            return None
        if command == "lockstep":  # returns the send times once every ACK is in
            ads.latest("delta").jobs.put(("lockstep", "lockstep"))
            return ads.results.get(timeout=600)
        if command == "firehose":  # returns the send times once every response is sent
            ads.latest("delta").jobs.put(("firehose", "lockstep"))
            return ads.results.get(timeout=600)
        if command == "forget":
            return self.forget(*args)
        if command == "abort":  # returns when the stream was aborted
            ads.latest(args[0]).jobs.put(("abort",))
            return ads.results.get(timeout=60)
        if command == "reset":
            with ads.lock:
                streams, ads.streams = ads.streams, []
            for stream in streams:
                stream.jobs.put(("end",))
            return None
        if command == "store_start":
            return self.store_start()
        if command == "store_load":
            return self.store_load(*args)
        if command == "store_modify":
            return self.store_modify(*args)
        raise ValueError(f"unknown command {command!r}")

    # ------------------------------------------------------------ ResourceStore

    def store_start(self) -> str:
        from xds_client.testing import ResourceStoreServer

        if self.store is None:
            self.store = ResourceStoreServer(history_size=1_000_000).start()
        return str(self.store.address)

    def store_load(self, namespace: str, n: int) -> int:
        """Create n dashboards in ``namespace``; returns the last resource version."""
        from bench._data import dashboard

        items = [(key, dashboard(key, 0)) for key in _keys(namespace, n)]
        rv = 0
        for start in range(0, n, 5000):
            rv = self.store.put_many(items[start : start + 5000])
        return int(rv)

    def store_modify(self, namespace: str, n: int, count: int) -> tuple[int, int]:
        """Modify ``count`` of the n dashboards in turn; returns (rv before, rv after)."""
        from bench._data import dashboard

        keys = _keys(namespace, n)
        before = int(self.store.resource_version)
        items = [(keys[i % n], dashboard(keys[i % n], i + 1)) for i in range(count)]
        rv = 0
        for start in range(0, count, 5000):
            rv = self.store.put_many(items[start : start + 5000])
        return before, int(rv)

    def close(self) -> None:
        self.ads.stopping.set()
        self.server.stop(grace=None).wait(5)
        if self.store is not None:
            self.store.stop()


def _keys(namespace: str, n: int) -> list[Any]:
    from bench._data import store_prefix

    prefix = store_prefix(namespace)
    return [prefix.with_name(f"dash-{i:06d}") for i in range(n)]


def main(conn: multiprocessing.connection.Connection) -> None:
    """Entry point of the server process."""
    worker = _Worker()
    try:
        worker.run(conn)
    finally:
        worker.close()


class ServerProcess:
    """The parent's handle on the server process (a context manager)."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=main, args=(child,), name="bench-server", daemon=True)
        self._proc.start()
        child.close()
        if not self._conn.poll(60):
            self._proc.kill()
            raise RuntimeError("the bench server did not start within 60 s")
        self.port: int = self._conn.recv()
        self.address = f"127.0.0.1:{self.port}"
        self.pid = self._proc.pid

    def post(self, command: str, *args: Any) -> None:
        """Send a command; read its reply later with :meth:`reply`."""
        self._conn.send((command, args))

    def reply(self, timeout: float = 600.0) -> Any:
        """The reply to the oldest command not yet answered."""
        if not self._conn.poll(timeout):
            raise TimeoutError("the bench server did not answer")
        result = self._conn.recv()
        if isinstance(result, Exception):
            raise result
        return result

    def call(self, command: str, *args: Any, timeout: float = 600.0) -> Any:
        """Send a command and wait for its reply."""
        self.post(command, *args)
        return self.reply(timeout)

    def close(self) -> None:
        if self._proc.is_alive():
            with contextlib.suppress(OSError, TimeoutError, EOFError):
                self.call("quit", timeout=10)
            self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
