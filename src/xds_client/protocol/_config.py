"""Configuration shared by the SotW and delta state machines."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from xds_client._prebuilt_dataclasses import dataclass
from xds_client.errors import ProtocolUsageError

if TYPE_CHECKING:
    from envoy.config.core.v3.base_pb2 import Node

__all__ = [
    "DOES_NOT_EXIST_TIMEOUT",
    "ProtocolConfig",
    "Validator",
    "check_does_not_exist_timeout",
]

Validator = Callable[[Message], None]
"""A user check for one decoded resource; it raises (any exception) to reject it."""

DOES_NOT_EXIST_TIMEOUT = 15.0
"""The default does-not-exist timer, in seconds (gRFC A27), for the core and the clients."""


def check_does_not_exist_timeout(timeout: float | None) -> None:
    """Refuse a timeout that is neither positive nor None (the core's and the clients')."""
    if timeout is not None and not timeout > 0:
        raise ProtocolUsageError(
            f"does_not_exist_timeout must be positive or None, got {timeout!r}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolConfig:
    """How a :class:`SotwProtocol` or :class:`DeltaProtocol` behaves.

    One config may be shared by many protocol objects.
    """

    node: Node
    """``envoy.config.core.v3.Node`` sent in the first request of every stream."""
    node_in_every_request: bool = False
    """Send ``node`` in every request, not only a stream's first (pollers need this)."""
    does_not_exist_timeout: float | None = DOES_NOT_EXIST_TIMEOUT
    """Seconds after sending a request for a name before it is reported as not
    existing (gRFC A27/A53); None disables the timer."""
    resource_timer_is_transient_error: bool = False
    """gRFC A88 server feature: a does-not-exist timer that runs out is a transient
    error (status ``TIMEOUT``, :class:`ResourceErrorReported`), not an absence."""
    fail_on_data_errors: bool = False
    """gRFC A88 server feature: a rejected update of a cached resource drops the
    cached value (``ResourceRemoved(reason="data_error")``) instead of keeping it."""
    ignore_resource_deletion: bool = False
    """Keep resources the server deletes and report :class:`ResourceDeletionIgnored`
    instead (gRFC A53). TTL expiry still removes."""
    reject_whole_response: bool = False
    """Envoy's behaviour: one bad resource rejects the whole response. The default
    (gRFC A46) applies the valid resources and NACKs naming the bad ones."""
    nack_code: int = 3
    """``google.rpc.Code`` put in ``error_detail.code`` of a NACK (3 INVALID_ARGUMENT)."""
    validators: Mapping[str, Validator] = field(default_factory=dict)
    """type URL -> callable run on every changed resource of that type; raising rejects it."""
    validate_rules: bool = True
    """Check every changed resource against its proto's ``(validate.rules)``
    (protoc-gen-validate) annotations, as Envoy does, and NACK the ones that fail,
    naming the field path. Runs before ``validators``."""
    lazy_decode: bool = False
    """Memory-lean cache: keep only the serialized bytes of each cached resource and
    decode them on every access of ``CachedResource.resource``. A SotW response is
    decoded a resource at a time (named, checked, dropped) and its events decode on
    first access of ``ResourceUpdated.resource``; delta events carry the message
    decoded on arrival. A decoded Cluster costs several times its bytes."""
    wall_time: Callable[[float], float] | None = None
    """Turns the ``now`` given to ``receive`` (the driver's monotonic seconds) into Unix
    seconds, for the ``(validate.rules)`` timestamp rules that compare with the current
    time (``lt_now``, ``gt_now``, ``within``). None (the default: the core reads no
    clock) leaves those rules unchecked; the clients pass one."""

    def __post_init__(self) -> None:
        check_does_not_exist_timeout(self.does_not_exist_timeout)
        for key in self.validators:
            if not isinstance(key, str) or "/" not in key:
                raise ProtocolUsageError(
                    f"validators are keyed by type URL, got {key!r}; "
                    "resources.type_url_of() converts aliases and classes"
                )
        if not 1 <= self.nack_code <= 16:
            raise ProtocolUsageError(
                f"nack_code must be a non-OK google.rpc.Code (1..16), got {self.nack_code!r}"
            )
