"""Internals of :class:`xds_client.testing.ControlPlane`, split by job.

- ``_store``: snapshots of resources per type (and optionally per node id).
- ``_log``: the record of streams, requests and responses, and bounded waits on it.
- ``_streams``: the SotW and delta stream handlers and the unary ``Fetch*`` answer.
- ``_rest``: the REST-JSON server on :mod:`http.server`.
"""
