"""An in-process ResourceStore server backed by SQLite, for tests.

It serves ``resource.ResourceStore`` and ``resource.Diagnostics`` on
127.0.0.1 with the semantics of Grafana's unified storage and Kubernetes:

- every write gets the next resource version (one counter for the store);
- create of an existing key is 409 AlreadyExists, update or delete with a
  stale resource version is 409 Conflict, a missing key is 404;
- list pages carry an opaque token pinned to the list's resource version:
  later pages show the store as it was at that version, even while others
  write (reconstructed from the event history);
- watch from ``since`` delivers only newer events; ``send_initial_events``
  sends the current objects then one bookmark; a ``since`` older than the kept
  history (``history_size`` events) is 410 Expired;
- labels come from ``metadata.labels`` of the JSON;
- either wire dialect (``dialect="grafana"``, the default, or ``"seed"``; see
  ``xds_client.store.Dialect``); in the grafana dialect list failures travel in
  ``ListResponse.error`` and lists can read ``history`` and ``trash``;
- names, namespaces, groups and resources are validated with Grafana's rules,
  list pages are cut at ``max_page_bytes`` (2 MiB, as Grafana) as well as at
  the limit, each write (object plus event) is one SQLite transaction, a file
  database is locked against a second server, and NaN, Infinity or JSON
  nested too deeply for Python are 400 Bad Request.

Fault injection: :meth:`ResourceStoreServer.drop_watches`,
:meth:`~ResourceStoreServer.end_watches`, :meth:`~ResourceStoreServer.fail_next`,
``errors_as_details`` (errors as ``google.rpc.Status`` details instead of in
the response), ``filter_labels`` (turn server-side filtering off) and
:meth:`~ResourceStoreServer.compact`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent import futures

import grpc

from xds_client.errors import TransportError
from xds_client.store._dialect import Dialect
from xds_client.store._proto import resource_pb2_grpc as pb_grpc
from xds_client.store._proto import search_pb2_grpc as search_grpc
from xds_client.testing._store._auth import AccessTokenCheck
from xds_client.testing._store._engine import _MAX_PAGE_BYTES, StoreEngine
from xds_client.testing._store._quota import QuotasServicer
from xds_client.testing._store._search import ResourceIndexServicer
from xds_client.testing._store._servicers import (
    BulkServicer,
    DiagnosticsServicer,
    StoreServicer,
)

__all__ = ["ResourceStoreServer"]


class ResourceStoreServer(StoreEngine):
    """Grafana's ResourceStore over SQLite, on ``127.0.0.1`` and a free port.

    ``with ResourceStoreServer() as srv:`` starts it; ``srv.address`` is
    ``"127.0.0.1:PORT"``. ``db`` is a SQLite file path, or None for memory.
    ``port`` is the port to listen on (0 for a free one; a busy port raises
    :class:`~xds_client.errors.TransportError`). ``server_credentials``
    (``grpc.ssl_server_credentials``) serve TLS instead of plaintext;
    ``interceptors`` are gRPC server interceptors, e.g. one that checks a token.
    ``auth`` checks Grafana's ``X-Access-Token`` (and namespace) on every call
    (:class:`~xds_client.testing.AccessTokenCheck`); ``quotas`` maps namespaces
    (``"*"``: the others) to the most objects each of their collections may hold
    (see :mod:`xds_client.testing._store._quota`).
    """

    def __init__(
        self,
        db: str | None = None,
        *,
        history_size: int = 100_000,
        max_workers: int = 64,
        errors_as_details: bool = False,
        filter_labels: bool = True,
        dialect: Dialect | str = Dialect.GRAFANA,
        max_page_bytes: int = _MAX_PAGE_BYTES,
        search: bool = True,
        port: int = 0,
        server_credentials: grpc.ServerCredentials | None = None,
        interceptors: Sequence[grpc.ServerInterceptor] = (),
        auth: AccessTokenCheck | None = None,
        quotas: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(
            db,
            history_size=history_size,
            errors_as_details=errors_as_details,
            filter_labels=filter_labels,
            dialect=dialect,
            max_page_bytes=max_page_bytes,
            search=search,
            quotas=quotas,
        )
        self.auth = auth
        """The access-token check of every call, or None (see ``auth``)."""
        if auth is not None:
            interceptors = (auth, *interceptors)
        self.server_credentials = server_credentials
        """TLS credentials, or None for plaintext (read at each ``start()``)."""
        self._requested_port = port
        self._interceptors = tuple(interceptors)
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._port = 0

    # ------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        """``"127.0.0.1:PORT"`` once started."""
        if self._server is None:
            raise RuntimeError("ResourceStoreServer is not started")
        return f"127.0.0.1:{self._port}"

    def start(self) -> ResourceStoreServer:
        """Open the database and start serving."""
        if self._server is not None:
            return self
        self._open_db()
        self._executor = futures.ThreadPoolExecutor(
            max_workers=self._max_workers, thread_name_prefix="resource-store"
        )
        server = grpc.server(
            self._executor,
            interceptors=list(self._interceptors),
            # Off: with SO_REUSEPORT a second server on a busy port starts too and
            # silently takes half of the clients. A busy port must be an error.
            options=[("grpc.so_reuseport", 0)],
        )
        pb_grpc.add_ResourceStoreServicer_to_server(StoreServicer(self), server)
        pb_grpc.add_DiagnosticsServicer_to_server(DiagnosticsServicer(self), server)
        if self.dialect is Dialect.GRAFANA:  # the seed proto has no BulkStore (nor Quotas)
            pb_grpc.add_BulkStoreServicer_to_server(BulkServicer(self), server)
            pb_grpc.add_QuotasServicer_to_server(QuotasServicer(self), server)
        if self.search:
            search_grpc.add_ResourceIndexServicer_to_server(
                ResourceIndexServicer(
                    lock=self._lock, read=lambda: (self._db, self._rv), calls=self.calls
                ),
                server,
            )
        hostport = f"127.0.0.1:{self._requested_port}"
        try:
            if self.server_credentials is None:
                bound = server.add_insecure_port(hostport)
            else:
                bound = server.add_secure_port(hostport, self.server_credentials)
        except RuntimeError as exc:
            bound, reason = 0, f": {exc}"
        else:
            reason = ""
        if bound == 0:
            self._abandon_start()
            raise TransportError(f"cannot bind {hostport}{reason}")
        self._port = bound
        server.start()
        self._server = server
        return self

    def _abandon_start(self) -> None:
        """Undo what a failed ``start()`` opened (the pool and the database)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def stop(self) -> None:
        """Stop serving, end every stream and close the database."""
        server, self._server = self._server, None
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if server is not None:
            server.stop(grace=None).wait(10)
        executor, self._executor = self._executor, None
        if executor is not None:
            # grpc does not stop the pool it was given; its idle threads would outlive us.
            executor.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> ResourceStoreServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
