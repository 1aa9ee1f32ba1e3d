"""Internals of :class:`xds_client.testing.ResourceStoreServer`, split by job (as
``testing/_xds/`` is for the ControlPlane).

- ``_engine``: the SQLite store: objects, versions, history, list pages, watches.
- ``_faults``: what fault injection delivers (failures, the ``fail_next`` queue).
- ``_servicers``: the gRPC servicers (ResourceStore, BulkStore, Diagnostics).
- ``_search``: ResourceIndex (Search, GetStats) over an FTS5 index.
"""
