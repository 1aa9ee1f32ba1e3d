"""The public surface of xds_client.store: twins that do not drift, documented names."""

from __future__ import annotations

import inspect

import pytest

from xds_client import store
from xds_client.errors import XdsClientError
from xds_client.store import (
    AsyncInformer,
    AsyncListIterator,
    AsyncResourceStoreClient,
    AsyncStoreWatch,
    Informer,
    ListIterator,
    ResourceStoreClient,
    StoreWatch,
    StoreWatchEvent,
)

# sync name -> async twin name, where they differ
TWIN_NAMES = {
    "close": "aclose",
    "__enter__": "__aenter__",
    "__exit__": "__aexit__",
    "__iter__": "__aiter__",
    "__next__": "__anext__",
}


def public(cls: type) -> set[str]:
    dunder = {"__enter__", "__exit__", "__iter__", "__next__", "__aenter__", "__aexit__"}
    dunder |= {"__aiter__", "__anext__"}
    return {n for n in vars(cls) if not n.startswith("_") or n in dunder}


def test_sync_and_async_twins_have_the_same_methods() -> None:
    pairs = [
        (ResourceStoreClient, AsyncResourceStoreClient),
        (ListIterator, AsyncListIterator),
        (StoreWatch, AsyncStoreWatch),
        (Informer, AsyncInformer),
    ]
    for sync_cls, async_cls in pairs:
        assert {TWIN_NAMES.get(n, n) for n in public(sync_cls)} == public(async_cls), sync_cls


def test_twin_methods_take_the_same_parameters() -> None:
    for name in public(ResourceStoreClient):
        sync_fn = getattr(ResourceStoreClient, name)
        async_fn = getattr(AsyncResourceStoreClient, TWIN_NAMES.get(name, name))
        if callable(sync_fn):
            sync_params = list(inspect.signature(sync_fn).parameters)
            assert sync_params == list(inspect.signature(async_fn).parameters), name


def test_exports_are_documented_and_errors_share_the_base() -> None:
    for name in store.__all__:
        value = getattr(store, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, name
        if inspect.isclass(value) and name.endswith("Error"):
            assert issubclass(value, XdsClientError), name


@pytest.mark.parametrize(
    ("old", "new"),
    [("Watch", StoreWatch), ("AsyncWatch", AsyncStoreWatch), ("WatchEvent", StoreWatchEvent)],
)
def test_the_old_watch_names_are_deprecated_aliases(old: str, new: type) -> None:
    # The xDS clients have a Watch and a WatchEvent of their own.
    with pytest.warns(DeprecationWarning, match=f"use xds_client.store.{new.__name__}"):
        assert getattr(store, old) is new
    assert old not in store.__all__
    with pytest.raises(AttributeError):
        store.NoSuchName  # noqa: B018
