"""Errors the protocol core raises when its caller misuses it."""

from __future__ import annotations

from xds_client.errors import UsageError

__all__ = ["ProtocolUsageError"]


class ProtocolUsageError(UsageError):
    """A call the protocol core does not allow now or for this type.

    Examples: ``receive()`` before ``connected()``, a delta-only type on a SotW
    stream, a bare string where an iterable of names is expected.
    """
