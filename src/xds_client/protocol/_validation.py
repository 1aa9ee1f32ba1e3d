"""Reading names from resources, running validators, and building NACK messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from xds_client.errors import ResourceError, ResourceValidationError, UnknownResourceTypeError
from xds_client.resources import resource_type

from ._config import ProtocolConfig, Validator

RulesVerdict = Callable[..., "tuple[str | None, bool]"]
"""``rules_verdict(message, now=None, data=None)``: the NACK reason under
``(validate.rules)``, and whether the message should be decoded again before it is
kept; ``data`` is the bytes the message was parsed from, when at hand."""

__all__ = [
    "MAX_ERROR_MESSAGE",
    "RESPONSE_KEY",
    "ResourceCheck",
    "nack_message",
    "resource_name",
    "resource_check",
    "twin_type_url",
    "run_validator",
]

rules_verdict: RulesVerdict | None = None
"""``_rules.rules_verdict``, imported with the first check (the compiler is not needed
to import the client)."""


def _rule_checker() -> RulesVerdict:
    global rules_verdict  # noqa: PLW0603 - loaded once, on first use
    if rules_verdict is None:
        from ._rules import rules_verdict as loaded

        rules_verdict = loaded
    return rules_verdict


MAX_ERROR_MESSAGE = 4096
"""Longest ``error_detail.message`` we send: servers log it, keep it bounded."""

RESPONSE_KEY = "(response)"
"""Key in ``ResponseRejected.errors`` for a problem of the whole response."""

# Field that carries the name, per message type (ClusterLoadAssignment says cluster_name).
_NAME_FIELDS = ("name", "cluster_name")
_name_field_cache: dict[type[Message], str | None] = {}


def name_field_of(cls: type[Message]) -> str | None:
    """The string field that carries the name of a ``cls`` message, or None."""
    try:
        return _name_field_cache[cls]  # by class: no descriptor lookup per resource
    except KeyError:
        pass
    descriptor = cls.DESCRIPTOR
    field_name = None
    for candidate in _NAME_FIELDS:
        fd = descriptor.fields_by_name.get(candidate)
        if fd is not None and fd.type == FieldDescriptor.TYPE_STRING:
            field_name = candidate
            break
    _name_field_cache[cls] = field_name
    return field_name


def resource_name(message: Message) -> str:
    """The name a bare resource carries in its body; raises :class:`ResourceError`."""
    field_name = name_field_of(type(message))
    if field_name is None:
        raise ResourceError(
            f"{message.DESCRIPTOR.full_name} has no name field; "
            "send it in a Resource wrapper with a name"
        )
    name = getattr(message, field_name)
    if not isinstance(name, str) or not name:
        raise ResourceError(f"{message.DESCRIPTOR.full_name} has an empty {field_name}")
    return name


def run_validator(validator: Validator | None, message: Message) -> str | None:
    """Run a user validator; the reason it gives for rejecting, or None."""
    if validator is None:
        return None
    try:
        validator(message)
    except Exception as exc:  # user code: any failure rejects the resource, never crashes us
        if isinstance(exc, ResourceValidationError):
            return str(exc) or "rejected by validator"
        text = str(exc)
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return None


_twins: dict[str, str | None] = {}


def twin_type_url(type_url: str) -> str | None:
    """The same resource's type URL in the other API version (gRFC A30: a client
    accepts both in a response), or None."""
    try:
        return _twins[type_url]
    except KeyError:
        pass

    twin: str | None = None
    try:
        rtype = resource_type(type_url)
        if rtype.alias is not None:
            twin = resource_type(rtype.alias, "v2" if rtype.api_version == "v3" else "v3").type_url
    except UnknownResourceTypeError:
        twin = None
    _twins[type_url] = twin
    return twin


class ResourceCheck:
    """The check of each changed resource of one type in one response: the proto's
    ``(validate.rules)`` first (when ``config.validate_rules``), then the user's
    validator. Called with a decoded message, it returns the reason to reject it, or
    None.

    After a call, ``fresh`` says whether the caller should keep a fresh decode of the
    message's bytes instead of the message: the rule check read a repeated or map field
    the message does not hold, and upb gave it an empty array in its arena (a block,
    about 370 B on a Cluster, for as long as the message is cached). Never in lean mode
    (``keeps_messages`` False), which keeps no message. Made per response, so a reader
    thread owns its flag.
    """

    __slots__ = ("_keeps", "_rules", "_validator", "_wall", "fresh")

    def __init__(
        self,
        rules: bool,
        validator: Validator | None,
        wall: float | None,
        keeps_messages: bool,
    ) -> None:
        self._rules = rules
        self._validator = validator
        self._wall = wall
        self._keeps = keeps_messages
        self.fresh = False

    def __call__(self, message: Message, data: bytes | None = None) -> str | None:
        """``data``: the bytes ``message`` was parsed from by its own class (not through a
        custom decoder), which lets a template-made resource be proved from them."""
        if self._rules:
            # Looked up at each call (tests count the calls by replacing it).
            verdict = rules_verdict or _rule_checker()
            reason, grew = verdict(message, self._wall, data)
            self.fresh = grew and self._keeps
            if reason is not None:
                return reason
        validator = self._validator
        return None if validator is None else run_validator(validator, message)


def resource_check(
    config: ProtocolConfig, type_url: str, now: float | None = None
) -> ResourceCheck | None:
    """The check of each changed resource of ``type_url`` (:class:`ResourceCheck`), or
    None for no check at all. ``now`` is the driver's (monotonic) time of the response:
    with ``config.wall_time`` it gives the timestamp rules that compare with the current
    time (``lt_now``, ``gt_now``, ``within``) their Unix time."""
    validator = config.validators.get(type_url)
    if not config.validate_rules and validator is None:
        return None
    wall = None if config.wall_time is None or now is None else config.wall_time(now)
    return ResourceCheck(config.validate_rules, validator, wall, not config.lazy_decode)


def nack_message(
    type_url: str, version: str, errors: Mapping[str, str], limit: int = MAX_ERROR_MESSAGE
) -> str:
    """``error_detail.message`` of a NACK: each bad resource and why, at most ``limit`` chars."""
    head = f"rejected {type_url} version {version!r}: {len(errors)} error(s): "
    parts: list[str] = []
    used = len(head)
    items = list(errors.items())
    for index, (name, reason) in enumerate(items):
        part = f"{name}: {reason}"
        if index:
            part = "; " + part
        remaining = len(items) - index
        tail = f"; ... and {remaining} more"
        if used + len(part) + (len(tail) if remaining > 1 else 0) > limit:
            # Keep what fits and say how much is missing, within the limit.
            tail = f" ... and {remaining} more"
            room = limit - used - len(tail)
            if room > 20:
                parts.append(part[:room])
            parts.append(tail)
            break
        parts.append(part)
        used += len(part)
    return (head + "".join(parts))[:limit]
