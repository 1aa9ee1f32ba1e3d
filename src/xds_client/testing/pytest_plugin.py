"""pytest fixtures for xds_client's in-process servers (registered via ``pytest11``)."""

from __future__ import annotations
