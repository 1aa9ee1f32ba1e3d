# Generated from xds_client/lrs/_async_client.py by tools/gen_sync.py: do not edit.
"""LrsClient: load reports to an LRS server, on threads.

Generated from ``_async_client.py`` with the thread backend: one thread runs the
stream and the report timer, one reads the server's responses, and gRPC's own
thread writes the requests. Every decision is the sans-I/O
:class:`~xds_client.lrs._reporter.LoadReporter`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import grpc
from envoy.config.core.v3.base_pb2 import Node as NodeProto
from envoy.service.load_stats.v3.lrs_pb2 import LoadStatsRequest, LoadStatsResponse

from xds_client._backends.threads import (
    Empty,
    Event,
    Inbox,
    Worker,
    open_channel,
    read_response,
    spawn,
)
from xds_client._backoff import Backoff
from xds_client.errors import ClientClosedError, ServerProtocolError, XdsClientError
from xds_client.node import Node, as_node_proto
from xds_client.transport._base import ChannelCredentialsConfig, ServerTarget
from xds_client.transport._channel import channel_arguments

from ._common import METHOD, lrs_target
from ._load import LoadStore
from ._reporter import LoadReporter

__all__ = ["LrsClient"]

log = logging.getLogger("xds_client.lrs")


class _Ended:
    """The stream ended; ``error`` says why (None: the server closed it cleanly)."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class _Closing:
    """``close()`` was called."""


_CLOSING: Final = _Closing()

_Item = LoadStatsResponse | _Ended | _Closing


class LrsClient:
    """A blocking client of an LRS server (``envoy.service.load_stats.v3``).

    It streams the load recorded in :attr:`store` to ``server``: the node first, then a
    report of the clusters the server asks for every ``load_reporting_interval`` it
    sets. A stream that fails is opened again with ``backoff`` (at once after a stream
    that was answered, as the xDS client does); counts recorded meanwhile go in the
    next report. ``server``, ``credentials``, ``bearer_token``, ``metadata`` and
    ``call_credentials`` mean what they mean for the xDS client (pass one of its
    ``ServerTarget`` to share its TLS and tokens).

    Use ``with`` or ``start()``/``close()``.
    """

    def __init__(
        self,
        server: str | ServerTarget,
        *,
        node: Node | NodeProto | None = None,
        store: LoadStore | None = None,
        credentials: ChannelCredentialsConfig | None = None,
        bearer_token: str | None = None,
        metadata: Mapping[str, str] | Sequence[tuple[str, str]] = (),
        call_credentials: grpc.CallCredentials | None = None,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store if store is not None else LoadStore()
        """Where the application records its load."""
        self.target = lrs_target(
            server,
            credentials=credentials,
            bearer_token=bearer_token,
            metadata=metadata,
            call_credentials=call_credentials,
        )
        self._node = as_node_proto(node)
        self._backoff = backoff if backoff is not None else Backoff()
        self._clock = clock
        self.reporter: LoadReporter | None = None
        """The stream's decisions (its ``plan`` is what the server asked); None until
        the client starts."""
        self.streams = 0
        """Streams opened so far."""
        self.reports = 0
        """Reports sent so far."""
        self._closed = False
        self._stop = Event()
        self._inbox: Inbox[_Item] | None = None
        self._worker: Worker | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.target.describe()} {state}>"

    def start(self) -> LrsClient:
        """Start reporting (once)."""
        if self._closed:
            raise ClientClosedError("this LRS client is closed")
        if self._worker is None:
            self.reporter = LoadReporter(self.store, self._node, self._clock())
            self._worker = spawn(self._run, self.reporter, name="xds-lrs")
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Close the stream and wait (up to ``timeout`` seconds) for it to end."""
        self._closed = True
        self._stop.set()
        if (inbox := self._inbox) is not None:
            inbox.put(_CLOSING)
        if (worker := self._worker) is not None:
            worker.join(timeout)

    def __enter__(self) -> LrsClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, reporter: LoadReporter) -> None:
        failures = self._backoff.state()
        while not self._closed:
            try:
                answered = self._stream(reporter)
            except XdsClientError as exc:  # e.g. a TLS file that cannot be read
                log.warning("LRS stream to %s not opened: %s", self.target.uri, exc)
                answered = False
            except Exception:  # a bug of ours must not end reporting silently
                log.exception("LRS stream to %s failed", self.target.uri)
                answered = False
            if answered:
                failures.reset()  # gRFC A57: an answered stream is opened again at once
                continue
            self._stop.wait(failures.next_delay())

    def _stream(self, reporter: LoadReporter) -> bool:
        """One stream, until it ends or the client closes; whether the server answered."""
        inbox: Inbox[_Item] = Inbox()
        requests: Inbox[LoadStatsRequest | None] = Inbox()
        self._inbox = inbox
        if self._closed:
            return False
        channel = open_channel(*channel_arguments(self.target))
        call: Any = channel.stream_stream(
            METHOD,
            request_serializer=LoadStatsRequest.SerializeToString,
            response_deserializer=LoadStatsResponse.FromString,
        )(self._requests(requests), metadata=self.target.call_metadata or None)
        self.streams += 1
        requests.put(reporter.stream_started())
        reader = spawn(self._read, call, inbox, name="xds-lrs-reader")
        answered = False
        try:
            while not self._closed:
                due = reporter.next_report_at
                item = inbox.get(None if due is None else max(0.0, due - self._clock()))
                if isinstance(item, Empty):
                    report = reporter.report(self._clock())
                    if report is not None:
                        requests.put(report)
                        self.reports += 1
                elif isinstance(item, LoadStatsResponse):
                    reporter.receive(item, self._clock())
                    answered = True
                elif isinstance(item, _Ended):
                    if item.error is not None:
                        log.info("LRS stream to %s ended: %s", self.target.uri, item.error)
                    break
                else:
                    break  # closing
        except ServerProtocolError as exc:
            log.warning("LRS server %s: %s; opening a new stream", self.target.uri, exc)
        finally:
            requests.put(None)
            call.cancel()
            reader.join(1.0)
            channel.close()
        return answered

    def _requests(self, requests: Inbox[LoadStatsRequest | None]) -> Iterator[LoadStatsRequest]:
        while True:
            item = requests.get(None)
            if item is None or isinstance(item, Empty):
                return
            yield item

    def _read(self, call: Any, inbox: Inbox[_Item]) -> None:
        try:
            while (response := read_response(call)) is not None:
                inbox.put(response)
        except (grpc.RpcError, ValueError) as exc:
            inbox.put(_Ended(exc))
            return
        inbox.put(_Ended(None))
