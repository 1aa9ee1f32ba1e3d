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

from xds_client.store._async_client import (
    AsyncListIterator,
    AsyncResourceStoreClient,
    AsyncStoreWatch,
)
from xds_client.store._async_informer import AsyncInformer
from xds_client.store._client import ListIterator, ResourceStoreClient, StoreWatch
from xds_client.store._errors import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    ErrorCause,
    ExpiredError,
    GoneError,
    InternalError,
    InvalidError,
    InvalidResponseError,
    NotFoundError,
    ResourceStoreError,
    SelectorError,
    ServerTimeoutError,
    TooManyRequestsError,
    UnavailableError,
)
from xds_client.store._informer import Informer
from xds_client.store._keys import ResourceKey, StoredObject, Value
from xds_client.store._list import ListPage
from xds_client.store._retry import DEFAULT_RETRY, RetryPolicy
from xds_client.store._selector import Requirement, matches, parse_selector
from xds_client.store._watch import EventType, StoreWatchEvent

__all__ = [
    # clients
    "ResourceStoreClient",
    "AsyncResourceStoreClient",
    "RetryPolicy",
    "DEFAULT_RETRY",
    # values
    "ResourceKey",
    "StoredObject",
    "Value",
    "ListPage",
    "ListIterator",
    "AsyncListIterator",
    "StoreWatchEvent",
    "EventType",
    "StoreWatch",
    "AsyncStoreWatch",
    "Informer",
    "AsyncInformer",
    # label selectors
    "Requirement",
    "parse_selector",
    "matches",
    # errors
    "ResourceStoreError",
    "BadRequestError",
    "NotFoundError",
    "AlreadyExistsError",
    "ConflictError",
    "ExpiredError",
    "GoneError",
    "InvalidError",
    "TooManyRequestsError",
    "UnavailableError",
    "ServerTimeoutError",
    "InternalError",
    "InvalidResponseError",
    "SelectorError",
    "ErrorCause",
]


# The xDS namespace has its own Watch, AsyncWatch and WatchEvent; these spellings of the
# store ones stay importable for one release.
_DEPRECATED = {
    "Watch": "StoreWatch",
    "AsyncWatch": "AsyncStoreWatch",
    "WatchEvent": "StoreWatchEvent",
}


def __getattr__(name: str) -> object:
    new = _DEPRECATED.get(name)
    if new is None:
        raise AttributeError(f"module 'xds_client.store' has no attribute {name!r}")
    import warnings

    warnings.warn(
        f"xds_client.store.{name} is deprecated; use {new}", DeprecationWarning, stacklevel=2
    )
    return globals()[new]
