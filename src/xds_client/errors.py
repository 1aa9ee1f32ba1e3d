"""Every exception xds_client raises on purpose, in one tree.

::

    XdsClientError                        base of everything below
    ├── UsageError                        the caller misused the API (a local error)
    │   ├── UnknownResourceTypeError      a type URL, alias or class we do not know
    │   ├── DuplicateResourceTypeError    register() of a type URL that is taken
    │   ├── ProtocolUsageError            the sans-I/O core driven out of order
    │   ├── ResourceNameError             a malformed xdstp:// name, or an unknown authority
    │   ├── ClientClosedError             a call on a client after close()
    │   ├── SelectorError                 [store] a label or field selector that is malformed
    │   └── ResourceFileError             [testing] a resource file that cannot be read
    ├── ResourceError                     a resource from the server is unusable (we NACK it)
    │   ├── TypeUrlMismatchError          an Any holds another type than expected
    │   ├── ResourceDecodeError           bytes that do not parse as the message
    │   └── ResourceValidationError       a validator rejected it (raise it in your own)
    │       └── RuleViolationError        a field breaks its proto's (validate.rules)
    ├── ServerProtocolError               the server broke the xDS protocol itself
    ├── BootstrapError                    a bootstrap file or JSON that cannot be used
    ├── TransportError                    the connection to the server failed
    │   ├── PollError                     [transport] one poll failed (``retryable`` says more)
    │   ├── TokenError                    [client] a call-credentials token file is unusable
    │   └── ServiceNotOfferedError        [conformance] the server does not implement a service
    ├── WaitTimeoutError                  a bounded wait ran out (also a TimeoutError)
    │   └── ResourceNotFoundError         the server said the awaited resource does not exist
    ├── DriverError                       [conformance] a driver could not make a change
    ├── PushError                         [load] an update driver could not change the config
    └── ResourceStoreError                [store] a failed ResourceStore call (code, reason ...)
        ├── BadRequestError               400, gRPC INVALID_ARGUMENT
        ├── UnauthorizedError             401, gRPC UNAUTHENTICATED
        │   └── TokenExchangeError        the access token could not be exchanged (store._auth)
        ├── ForbiddenError                403, gRPC PERMISSION_DENIED
        │   └── QuotaExceededError        403 that says it is a quota (Grafana's Create over quota)
        ├── NotFoundError                 404, gRPC NOT_FOUND
        ├── ConflictError                 409, gRPC ABORTED, "optimistic locking failed"
        │   └── AlreadyExistsError        409 AlreadyExists (or "already exists")
        ├── ExpiredError                  410 (``GoneError``): a version or page token too old
        ├── MessageTooLargeError          413: a request or response over max_message_size
        ├── InvalidError                  422
        ├── TooManyRequestsError          429, and RESOURCE_EXHAUSTED that is not a size limit
        ├── StoreNotImplementedError      501, gRPC UNIMPLEMENTED (also a NotImplementedError)
        ├── UnavailableError              503, gRPC UNAVAILABLE
        ├── ServerTimeoutError            504, gRPC DEADLINE_EXCEEDED
        ├── InternalError                 500 and any other status
        └── InvalidResponseError          an impossible answer (also a ServerProtocolError)
            └── DeletedWithoutObjectError a DELETED watch event with no object to name the key

The classes marked ``[store]`` are defined in :mod:`xds_client.store` (its
``_errors.py`` maps gRPC statuses and ``ErrorResult`` to them), ``[transport]`` in
:mod:`xds_client.transport`, ``[client]`` in ``xds_client.client._credentials``,
``[testing]`` in :mod:`xds_client.testing`, ``[conformance]`` in
:mod:`xds_client.conformance`, ``[load]`` in :mod:`xds_client.load`; the rest here.
``tests/test_errors_tree.py`` holds this drawing to the classes.

One warning, not an error: ``XdsClientLeakWarning`` (a ``ResourceWarning``, [testing],
the pytest plugin's) says a test left an xDS client running.
"""

from __future__ import annotations

__all__ = [
    "XdsClientError",
    "UsageError",
    "UnknownResourceTypeError",
    "DuplicateResourceTypeError",
    "ProtocolUsageError",
    "ResourceNameError",
    "ClientClosedError",
    "ResourceError",
    "TypeUrlMismatchError",
    "ResourceDecodeError",
    "ResourceValidationError",
    "RuleViolationError",
    "ServerProtocolError",
    "BootstrapError",
    "TransportError",
    "WaitTimeoutError",
    "ResourceNotFoundError",
]


class XdsClientError(Exception):
    """Base class of every error xds_client raises on purpose."""


class UsageError(XdsClientError):
    """The caller used the API wrongly; nothing was sent to a server."""


class UnknownResourceTypeError(UsageError, LookupError):
    """A resource type given by type URL, alias or class is not registered."""

    def __init__(self, spec: object) -> None:
        self.spec = spec
        super().__init__(
            f"unknown xDS resource type {spec!r}; use a registered type URL, alias "
            "(lds rds srds vhds cds eds sds rtds ecds) or message class, or register() it"
        )


class DuplicateResourceTypeError(UsageError):
    """register() was called for a type URL that already names another message."""


class ProtocolUsageError(UsageError):
    """A call the protocol core does not allow now or for this type.

    Examples: ``receive()`` before ``connected()``, a delta-only type on a SotW
    stream, a bare string where an iterable of names is expected.
    """


class ResourceNameError(UsageError, ValueError):
    """An ``xdstp://`` resource name that is malformed (xRFC TP1) or whose
    authority the client does not know (gRFC A47)."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"resource name {name!r}: {reason}")


class ClientClosedError(UsageError):
    """The client was closed; create a new one."""


class ResourceError(XdsClientError):
    """A resource received from the server cannot be used.

    The protocol core turns these into a NACK whose message names the resource
    and this error's text.
    """


class TypeUrlMismatchError(ResourceError):
    """An ``Any`` carries a different type than the one expected."""

    def __init__(self, expected: str, actual: str) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(f"expected resource type {expected!r}, got {actual!r}")


class ResourceDecodeError(ResourceError):
    """The bytes of a resource do not parse as its message type."""

    def __init__(self, type_url: str, reason: str) -> None:
        self.type_url = type_url
        self.reason = reason
        super().__init__(f"cannot decode {type_url}: {reason}")


class ResourceValidationError(ResourceError):
    """A user-supplied validator rejected a resource."""


class RuleViolationError(ResourceValidationError):
    """A field breaks a ``(validate.rules)`` annotation of its proto (as Envoy checks).

    ``path`` is the field path from the checked message (``load_assignment.
    endpoints[0].lb_endpoints``), ``reason`` the rule it breaks, ``message_type``
    the full name of the checked message.
    """

    def __init__(self, text: str, *, path: str, reason: str, message_type: str) -> None:
        self.path = path
        self.reason = reason
        self.message_type = message_type
        super().__init__(text)


class ServerProtocolError(XdsClientError):
    """The server sent something the xDS protocol does not allow."""


class BootstrapError(XdsClientError):
    """A gRPC xDS bootstrap file or JSON value cannot be used.

    ``field`` names the offending JSON path, such as ``xds_servers[0].server_uri``.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class TransportError(XdsClientError):
    """The connection to a server failed or was refused."""


class WaitTimeoutError(XdsClientError, TimeoutError):
    """A bounded wait (``wait_for``, ``wait_synced`` ...) ran out of time."""


class ResourceNotFoundError(WaitTimeoutError, LookupError):
    """``wait_for`` stopped early: the server reported the resource does not exist.

    It could still appear later, but a wait that the server already answered is not
    left to run out its timeout. A :class:`WaitTimeoutError` too, so code that caught
    the timeout still does.
    """
