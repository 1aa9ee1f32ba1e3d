"""One simulated xDS client: its own node, HTTP/2 connection and ADS stream.

The xDS rules are the library's sans-I/O cores (:class:`SotwProtocol`,
:class:`DeltaProtocol`) in lean mode: each cached resource is kept as its bytes,
decoded only to follow references (once per distinct resource, fleet-wide, see
:class:`References`) and, with ``validate``, to check it as Envoy would. The
driver around them is a plain read loop: read a response, hand it to the core,
write the ACK or NACK it owes, subscribe to what the new resources name.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any, Protocol

import grpc
import grpc.aio
from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryResponse

from xds_client.protocol import DeltaProtocol, ResponseAccepted, ResponseRejected, SotwProtocol
from xds_client.protocol._raw import parse_raw_response

from ._metrics import ClientStats, Recorder
from ._options import FleetOptions
from ._profile import CDS, EDS, LDS, RDS, References

if TYPE_CHECKING:
    from envoy.config.core.v3.base_pb2 import Node

    from xds_client.protocol import ProtocolConfig

__all__ = ["CHANNEL_OPTIONS", "FleetView", "SimClient"]


class FleetView(Protocol):
    """What a client uses of its :class:`~xds_client.load.Fleet` (which imports this
    module): the options, the shared recorder and references, and its notices."""

    options: FleetOptions
    recorder: Recorder
    references: References
    first_response_seen: bool
    last_error: str

    def _client_completed(self, client: SimClient, now: float) -> None: ...


SOTW_METHOD = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
DELTA_METHOD = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"

CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    # grpcio shares one subchannel (one TCP connection) per target between the channels
    # of a process (grpc/grpc#20985): without this, N clients are one connection.
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    # An xDS client reconnects by itself; gRPC's retry buffer would cost about 5 KiB a
    # client for nothing (measured: 61 KiB -> 56 KiB per idle connection and stream).
    ("grpc.enable_retries", 0),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
)

_BACKOFF_BASE = 0.2
_BACKOFF_MAX = 2.0


class _Storm(Exception):  # noqa: N818 - a control-flow signal
    """The fleet dropped this stream on purpose (a reconnect storm)."""


class _StatusLost(Exception):  # noqa: N818 - a control-flow signal
    """The stream ended while a request was being written; gRPC lost its status."""


STATUS_LOST = "ended during a write (status lost)"
"""The error key of a stream whose status grpc.aio replaced (see :class:`_StatusLost`)."""


class SimClient:
    """One simulated client; :meth:`run` is its task."""

    def __init__(self, index: int, node: Node, fleet: FleetView, config: ProtocolConfig) -> None:
        self.index = index
        self.node = node
        self._fleet = fleet
        delta = fleet.options.protocol == "delta"
        self.proto: SotwProtocol | DeltaProtocol = (
            DeltaProtocol(config) if delta else SotwProtocol(config)
        )
        self.started = 0.0
        self.connected = False  # the current stream has received a response
        self.complete = False  # a complete config on the current stream
        self.ever_complete = False
        self.ever_connected = False
        self.streams = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.acks = 0
        self.nacks = 0
        self.errors = 0
        self.first_config: float | None = None
        self.complete_at: float | None = None  # on the current stream
        self._accepted: dict[str, str] = {}  # type URL -> last version answered with ACK
        self._stream_acked: set[str] = set()  # types ACKed on the current stream
        self._call: Any = None
        # source type URL -> target type URL -> names its accepted resources refer to
        self._refs: dict[str, dict[str, set[str]]] = {}
        self._subscribed: dict[str, set[str]] = {}  # followed names, by type URL
        self._stopping = False
        self._storm = False

    # -------------------------------------------------------------- wire helpers

    def _serialize(self, request: Any) -> bytes:
        data: bytes = request.SerializeToString()
        self.bytes_out += len(data)
        return data

    def _parse_sotw(self, data: bytes) -> Any:
        self.bytes_in += len(data)
        return parse_raw_response(data)

    def _parse_delta(self, data: bytes) -> Any:

        self.bytes_in += len(data)
        return DeltaDiscoveryResponse.FromString(data)

    # -------------------------------------------------------------- lifecycle

    def _subscribe_initial(self) -> None:
        opts = self._fleet.options
        if opts.profile == "envoy":
            self.proto.subscribe(LDS, None)
            self.proto.subscribe(CDS, None)
        else:
            self.proto.subscribe(LDS, [opts.listener])

    async def run(self) -> None:
        """Open streams until stopped, reconnecting with backoff as a real client does."""
        loop = asyncio.get_running_loop()
        self.started = loop.time()
        self._subscribe_initial()
        channel = grpc.aio.insecure_channel(self._fleet.options.server, options=CHANNEL_OPTIONS)
        try:
            await self._streams(channel, loop)
        finally:
            await channel.close(grace=None)

    async def _streams(self, channel: grpc.aio.Channel, loop: asyncio.AbstractEventLoop) -> None:
        fleet = self._fleet
        delta = isinstance(self.proto, DeltaProtocol)
        method = channel.stream_stream(
            DELTA_METHOD if delta else SOTW_METHOD,
            request_serializer=self._serialize,
            response_deserializer=self._parse_delta if delta else self._parse_sotw,
        )
        failures = 0
        while not self._stopping:
            self.streams += 1
            if self.streams > 1:
                fleet.recorder.reconnects += 1
            call = self._call = method()
            got_response = False
            code, detail = "OK", "the server ended the stream"
            try:
                got_response = await self._serve(call, loop)
            except (asyncio.CancelledError, _Storm):
                if not (self._storm or self._stopping):
                    raise  # the task itself was cancelled
                code = ""
            except _StatusLost:
                code, detail = STATUS_LOST, ""
            except grpc.aio.AioRpcError as exc:
                code, detail = exc.code().name, exc.details() or ""
                if code == "CANCELLED" and (self._storm or self._stopping):
                    code = ""
            finally:
                self._call = None
                call.cancel()
                self._disconnected(loop.time())
            if self._stopping:
                return
            if code == "":
                self._storm = False
                failures = 0
                continue  # a storm: straight back, as every proxy of a dropped fleet does
            self.errors += 1
            fleet.recorder.failed(self.index, code, detail)
            if code != STATUS_LOST or not fleet.last_error:
                fleet.last_error = f"{code}: {detail}" if detail else code
            failures = 0 if got_response else failures + 1
            delay = min(_BACKOFF_MAX, _BACKOFF_BASE * 2 ** min(failures, 8))
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))

    async def _serve(self, call: Any, loop: asyncio.AbstractEventLoop) -> bool:
        proto = self.proto
        recorder = self._fleet.recorder
        proto.connected(loop.time())
        await self._send(call)
        if isinstance(proto, DeltaProtocol) and self.ever_complete:
            # A reconnected delta stream declared what it holds (initial_resource_versions):
            # the server may rightly send nothing, so holding it all is being back.
            self._stream_acked = {t for t in proto.subscribed_types() if proto.resources(t)}
            self._check_complete(loop.time())
        got = False
        while True:
            response = await call.read()
            if response is grpc.aio.EOF:
                return got
            if self._storm:
                raise _Storm  # (a response that raced the cancel)
            now = loop.time()
            if not got:
                got = self.connected = self.ever_connected = True
                self._fleet.first_response_seen = True
            type_url = response.type_url
            version = (
                response.system_version_info if isinstance(proto, DeltaProtocol)
                else response.version_info
            )  # fmt: skip
            recorder.received(type_url, version, now)
            events = (
                proto.receive(response, now)
                if isinstance(proto, DeltaProtocol)
                else proto.receive_batched(response, now)
            )
            outcome: ResponseAccepted | ResponseRejected | None = None
            for event in events:
                if type(event) is ResponseAccepted or type(event) is ResponseRejected:
                    outcome = event
            if outcome is not None and type(outcome) is ResponseAccepted:
                self._follow(type_url)
            await self._send(call)
            if outcome is not None:
                self._answered(type_url, version, outcome, loop.time())

    async def _send(self, call: Any) -> None:
        for request in self.proto.requests_to_send():
            if call.done():
                return  # the call ended: the next read reports its status
            try:
                await call.write(request)
            except asyncio.InvalidStateError:
                return  # the call ended meanwhile: the next read reports its status
            except grpc.aio.AioRpcError as exc:
                if "SendMessageOperation" in (exc.debug_error_string() or ""):
                    # The write raced the end of the call: grpc.aio then replaces the
                    # server's status with INTERNAL "Internal error from Core".
                    raise _StatusLost from None
                raise

    def _answered(
        self, type_url: str, version: str, outcome: ResponseAccepted | ResponseRejected, now: float
    ) -> None:
        accepted = type(outcome) is ResponseAccepted
        previous = self._accepted.get(type_url)
        push = previous is not None and previous != version
        detail = ""
        if not accepted:
            assert isinstance(outcome, ResponseRejected)
            detail = "; ".join(f"{k}: {v}" for k, v in outcome.errors.items())[:300]
        else:
            self._accepted[type_url] = version
            self._stream_acked.add(type_url)
        if accepted:
            self.acks += 1
        else:
            self.nacks += 1
        self._fleet.recorder.answered(
            self.index, type_url, version, accepted=accepted, push=push, now=now, detail=detail
        )
        self._check_complete(now)

    def _check_complete(self, now: float) -> None:
        if not self.complete and self._is_complete():
            self.complete = True
            self.complete_at = now
            if not self.ever_complete:
                self.ever_complete = True
                self.first_config = now - self.started
                self._fleet.recorder.completed(self.index, self.first_config)
            self._fleet._client_completed(self, now)

    def _is_complete(self) -> bool:
        proto = self.proto
        acked = self._stream_acked
        for type_url in proto.subscribed_types():
            if type_url not in acked:
                return False
        return proto.all_cached()

    def _follow(self, type_url: str) -> None:
        """Subscribe to what the resources of ``type_url`` now name (and drop the rest)."""
        targets = _FOLLOWS[self._fleet.options.profile].get(type_url)
        if not targets:
            return
        cached = self.proto.resources(type_url)
        wanted = self._fleet.references.wanted(type_url, [e.raw for e in cached.values()])
        self._refs[type_url] = wanted
        for target in targets:
            names: set[str] = set()
            for by_source in self._refs.values():
                names |= by_source.get(target, set())
            self._resubscribe(target, names)

    def _resubscribe(self, type_url: str, names: set[str]) -> None:
        proto = self.proto
        held = self._subscribed.get(type_url, set())
        if names == held:
            return
        added, removed = names - held, held - names
        if removed:
            proto.unsubscribe(type_url, removed)
        if added:
            proto.subscribe(type_url, added)
        self._subscribed[type_url] = names

    def _disconnected(self, now: float) -> None:
        if self.proto.is_connected:
            self.proto.disconnected(now)
        self.connected = False
        self.complete = False
        self.complete_at = None
        self._stream_acked = set()

    # -------------------------------------------------------------- control

    def drop(self) -> None:
        """Drop the stream now (a reconnect storm); the client opens a new one at once."""
        self._storm = True
        call = self._call
        if call is not None:
            call.cancel()

    def stop(self) -> None:
        """End the client: its stream closes and :meth:`run` returns."""
        self._stopping = True
        call = self._call
        if call is not None:
            call.cancel()

    def resources_held(self) -> int:
        """How many resources the client caches now."""
        return sum(len(self.proto.resources(t)) for t in self.proto.subscribed_types())

    def stats(self) -> ClientStats:
        """What this client saw so far."""
        return ClientStats(
            index=self.index,
            node_id=self.node.id,
            first_config=None if self.first_config is None else round(self.first_config, 6),
            streams=self.streams,
            acks=self.acks,
            nacks=self.nacks,
            errors=self.errors,
            bytes_received=self.bytes_in,
            bytes_sent=self.bytes_out,
            resources_held=self.resources_held(),
        )


# What an accepted response of a type makes the client subscribe to, per profile.
_FOLLOWS: dict[str, dict[str, tuple[str, ...]]] = {
    "envoy": {LDS: (RDS,), CDS: (EDS,)},
    "grpc": {LDS: (RDS, CDS), RDS: (CDS,), CDS: (EDS,)},
}
