"""A client for Grafana's unified-storage ResourceStore gRPC API.

Sync and async twins with the same methods::

    from xds_client.store import ResourceStoreClient, ResourceKey

    store = ResourceStoreClient("127.0.0.1:10000")
    key = ResourceKey("dashboard.grafana.app", "dashboards", "default", "a")
    rv = store.create(key, {"spec": {"title": "A"}})
    for event in store.watch(key.prefix(), since=rv):
        ...

See ``docs/store.md`` for the guide.
"""

from __future__ import annotations

from xds_client.store._async_client import AsyncListIterator, AsyncResourceStoreClient, AsyncWatch
from xds_client.store._bulk import BulkItem, BulkRejected, BulkResult, BulkSummary
from xds_client.store._client import ListIterator, ResourceStoreClient, Watch
from xds_client.store._dialect import Dialect, ListSource
from xds_client.store._errors import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    ErrorCause,
    ExpiredError,
    ForbiddenError,
    GoneError,
    InternalError,
    InvalidError,
    InvalidResponseError,
    MessageTooLargeError,
    NotFoundError,
    ResourceStoreError,
    SelectorError,
    ServerTimeoutError,
    StoreNotImplementedError,
    TooManyRequestsError,
    UnauthorizedError,
    UnavailableError,
)
from xds_client.store._informer import AsyncInformer, Informer, label_index
from xds_client.store._keys import ResourceKey, StoredObject, Value
from xds_client.store._list import ListPage
from xds_client.store._reflector import ReflectorBackoff
from xds_client.store._retry import DEFAULT_RETRY, RetryPolicy
from xds_client.store._search import KindStats, SearchFacet, SearchHit, SearchResult
from xds_client.store._selector import (
    Requirement,
    matches,
    parse_field_selector,
    parse_selector,
)
from xds_client.store._watch import EventType, WatchEvent

NotImplementedError = StoreNotImplementedError
"""501 or gRPC UNIMPLEMENTED (also a subclass of the built-in ``NotImplementedError``)."""

__all__ = [
    # clients
    "ResourceStoreClient",
    "AsyncResourceStoreClient",
    "RetryPolicy",
    "DEFAULT_RETRY",
    "Dialect",
    "ListSource",
    # values
    "ResourceKey",
    "StoredObject",
    "Value",
    "ListPage",
    "ListIterator",
    "BulkItem",
    "BulkResult",
    "BulkSummary",
    "BulkRejected",
    "SearchResult",
    "SearchHit",
    "SearchFacet",
    "KindStats",
    "AsyncListIterator",
    "WatchEvent",
    "EventType",
    "Watch",
    "AsyncWatch",
    "Informer",
    "AsyncInformer",
    "ReflectorBackoff",
    "label_index",
    # label selectors
    "Requirement",
    "parse_selector",
    "parse_field_selector",
    "matches",
    # errors
    "ResourceStoreError",
    "BadRequestError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "AlreadyExistsError",
    "ConflictError",
    "ExpiredError",
    "GoneError",
    "InvalidError",
    "MessageTooLargeError",
    "TooManyRequestsError",
    "NotImplementedError",
    "StoreNotImplementedError",
    "UnavailableError",
    "ServerTimeoutError",
    "InternalError",
    "InvalidResponseError",
    "SelectorError",
    "ErrorCause",
]
