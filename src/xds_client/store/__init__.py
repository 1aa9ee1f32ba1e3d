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

import warnings
from typing import TYPE_CHECKING

from xds_client.store._async_client import (
    AsyncListIterator,
    AsyncResourceStoreClient,
    AsyncStoreWatch,
)
from xds_client.store._async_informer import AsyncInformer
from xds_client.store._auth import (
    ExchangeBackoff,
    ExchangedToken,
    HttpTokenExchanger,
    TokenExchange,
    TokenExchangeError,
)
from xds_client.store._bulk import BulkItem, BulkRejected, BulkResult, BulkSummary
from xds_client.store._calls import ListPage
from xds_client.store._client import ListIterator, ResourceStoreClient, StoreWatch
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
    QuotaExceededError,
    ResourceStoreError,
    SelectorError,
    ServerTimeoutError,
    StoreNotImplementedError,
    TooManyRequestsError,
    UnauthorizedError,
    UnavailableError,
)
from xds_client.store._informer import Informer
from xds_client.store._informer_cache import label_index
from xds_client.store._keys import ResourceKey, StoredObject, Value
from xds_client.store._quota import QuotaUsage
from xds_client.store._reflector import ReflectorBackoff
from xds_client.store._retry import DEFAULT_RETRY, RetryPolicy
from xds_client.store._search import KindStats, SearchFacet, SearchHit, SearchResult
from xds_client.store._selector import (
    Requirement,
    matches,
    parse_field_selector,
    parse_selector,
)
from xds_client.store._watch import EventType, StoreWatchEvent

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
    # authentication (Grafana's X-Access-Token and X-Id-Token)
    "TokenExchange",
    "HttpTokenExchanger",
    "ExchangedToken",
    "ExchangeBackoff",
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
    "QuotaUsage",
    "AsyncListIterator",
    "StoreWatchEvent",
    "EventType",
    "StoreWatch",
    "AsyncStoreWatch",
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
    "TokenExchangeError",
    "ForbiddenError",
    "QuotaExceededError",
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

# The names the store used to share with the xDS clients, for one release.
_DEPRECATED = {
    "Watch": "StoreWatch",
    "AsyncWatch": "AsyncStoreWatch",
    "WatchEvent": "StoreWatchEvent",
}

if TYPE_CHECKING:
    Watch = StoreWatch
    AsyncWatch = AsyncStoreWatch
    WatchEvent = StoreWatchEvent


def __getattr__(name: str) -> object:
    new = _DEPRECATED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"xds_client.store.{name} is deprecated (the xDS clients have a {name} of their "
        f"own); use xds_client.store.{new}",
        DeprecationWarning,
        stacklevel=2,
    )
    return globals()[new]
