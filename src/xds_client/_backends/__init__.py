"""What truly differs between the thread and the asyncio drivers, in two small modules.

The asyncio modules of the drivers (``client/_async.py``, ``store/_async_informer.py``,
``transport/_async_polling_stream.py``, the transports ``transport/_async_grpc.py``,
``_async_fetch.py``, ``_async_rest.py`` and ``graph/_async_watch.py``) are written once against
:mod:`xds_client._backends.asyncio`; ``tools/gen_sync.py`` turns them into their thread
twins, which use :mod:`xds_client._backends.threads` instead. Both backends offer the
same names with the ``Async`` prefix dropped on the thread side (``AsyncEvent`` and
``Event``, ``AsyncCondition`` and ``Condition``, ...), so a substitution table is
enough. The thread backend imports no asyncio: the sync clients work inside a running
event loop (a notebook) and load faster.
"""
