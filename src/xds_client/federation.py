"""New-style ``xdstp://`` resource names (xRFC TP1, gRFC A47).

A name ``xdstp://{authority}/{resource type}/{id}?{context params}`` says which
authority (and so which xDS servers) holds the resource. The same resource may
be written with its context parameters in any order; :func:`normalize_name`
gives the one form that is sent to servers and used as a cache key (parameters
sorted by key, the last value of a repeated key kept, as A47 suggests).
Old-style names (anything not starting with ``xdstp:``) are left unchanged.

In delta xDS, a name whose id ends with ``/*`` (or is ``*``) is a *glob
collection*: it subscribes every resource directly under that path, as Envoy
and go-control-plane do.

This module is pure (no I/O), so the protocol core may use it.
"""

from __future__ import annotations

from collections.abc import Mapping

from xds_client._prebuilt_dataclasses import dataclass
from xds_client.errors import ResourceNameError

__all__ = [
    "OLD_STYLE_AUTHORITY",
    "XDSTP_SCHEME",
    "ResourceNameError",
    "XdstpName",
    "authority_label",
    "expand_listener_template",
    "glob_collection_of",
    "is_glob_collection",
    "is_xdstp",
    "listener_name_for_target",
    "normalize_name",
    "parse_xdstp",
    "percent_encode_path",
]

XDSTP_SCHEME = "xdstp:"
_PREFIX = "xdstp://"
TYPE_URL_PREFIX = "type.googleapis.com/"
# RFC 3986 section 3.3: a path may hold unreserved, sub-delims, ":", "@" and "/".
_PATH_SAFE = "!$&'()*+,;=:@/"
# Query parts (keys and values) keep the same set minus the separators "&" and "=".
_QUERY_SAFE = "!$'()*+,;:@/?"


def is_xdstp(name: str) -> bool:
    """Whether ``name`` is a new-style name (it starts with ``xdstp:``)."""
    return name.startswith(XDSTP_SCHEME)


OLD_STYLE_AUTHORITY = "#old"
"""The authority label of an old-style name in metrics (gRFC A78)."""


def authority_label(name: str) -> str:
    """The authority of ``name`` for metrics: its xdstp authority, or ``"#old"``."""
    if not name.startswith(_PREFIX):
        return OLD_STYLE_AUTHORITY
    return name[len(_PREFIX) :].partition("/")[0]


def percent_encode_path(text: str) -> str:
    """Percent-encode what may not stand in a URI path (A47: RFC 3986 section 3.3)."""
    from urllib.parse import quote

    return quote(text, safe=_PATH_SAFE)


@dataclass(frozen=True, slots=True)
class XdstpName:
    """The parts of an ``xdstp://`` name; ``str()`` gives its normalised form."""

    authority: str
    """The URI authority; empty for ``xdstp:///type/id`` (A47 keys it as "")."""
    resource_type: str
    """The resource type without ``type.googleapis.com/``, e.g.
    ``envoy.config.listener.v3.Listener``."""
    id: str
    """The path after the type (may hold ``/``; ends with ``*`` for a glob)."""
    context_params: tuple[tuple[str, str], ...] = ()
    """Context parameters sorted by key, each key once."""

    def __init__(  # made per parsed name: not record's generic __init__
        self,
        authority: str,
        resource_type: str,
        id: str,
        context_params: tuple[tuple[str, str], ...] = (),
    ) -> None:
        setter = object.__setattr__
        setter(self, "authority", authority)
        setter(self, "resource_type", resource_type)
        setter(self, "id", id)
        setter(self, "context_params", context_params)

    @property
    def type_url(self) -> str:
        """The type URL this name's resource type stands for."""
        return TYPE_URL_PREFIX + self.resource_type

    @property
    def is_glob(self) -> bool:
        """Whether this names a glob collection (``.../*``)."""
        return self.id == "*" or self.id.endswith("/*")

    def __str__(self) -> str:
        text = f"{_PREFIX}{self.authority}/{self.resource_type}/{self.id}"
        if self.context_params:
            from urllib.parse import quote

            text += "?" + "&".join(
                f"{quote(k, safe=_QUERY_SAFE)}={quote(v, safe=_QUERY_SAFE)}"
                for k, v in self.context_params
            )
        return text


def parse_xdstp(name: str) -> XdstpName:
    """Parse and validate an ``xdstp://`` name.

    Raises :class:`ResourceNameError` saying what is wrong: not ``xdstp://``,
    no resource type or id, a processing directive (``#...``, which gRPC and
    this client do not support), or a context parameter without ``=``.
    """
    if not name.startswith(_PREFIX):
        raise ResourceNameError(name, "an xdstp name starts with 'xdstp://'")
    rest = name[len(_PREFIX) :]
    if "#" in rest:
        raise ResourceNameError(name, "processing directives ('#...') are not supported")
    rest, _, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    if not slash:
        raise ResourceNameError(name, "has no resource type after the authority")
    if "@" in authority:
        raise ResourceNameError(name, "the authority must not hold user information ('@')")
    resource_type, slash, rid = path.partition("/")
    if not resource_type:
        raise ResourceNameError(name, "has an empty resource type")
    if resource_type.startswith(TYPE_URL_PREFIX.rstrip("/")) or "/" in resource_type:
        raise ResourceNameError(name, "the resource type is a message name, not a type URL")
    if not slash or not rid:
        raise ResourceNameError(name, "has no id after the resource type")
    params: dict[str, str] = {}
    if query:
        from urllib.parse import unquote

        for part in query.split("&"):
            if not part:
                continue
            key, eq, value = part.partition("=")
            if not eq or not key:
                raise ResourceNameError(name, f"context parameter {part!r} is not 'key=value'")
            # The last value of a repeated key wins (A47).
            params[unquote(key)] = unquote(value)
    return XdstpName(authority, resource_type, rid, tuple(sorted(params.items())))


def normalize_name(name: str) -> str:
    """The normalised form of a resource name; old-style names come back unchanged."""
    if not name.startswith(XDSTP_SCHEME):
        return name
    return str(parse_xdstp(name))


def is_glob_collection(name: str) -> bool:
    """Whether ``name`` is an ``xdstp://`` glob collection (cheap, no full parse)."""
    if not name.startswith(_PREFIX):
        return False
    path = name.partition("?")[0]
    return path.endswith("/*") and path.count("/") >= 4  # xdstp: / / auth / type / *


def glob_collection_of(name: str) -> str | None:
    """The glob collection a resource belongs to (its last path segment as ``*``).

    ``xdstp://a/T/some/leaf?k=v`` belongs to ``xdstp://a/T/some/*?k=v``; an
    old-style name, or one directly under its type, belongs to none. Used to
    match a resource sent by the server against a glob subscription.
    """
    if not name.startswith(_PREFIX):
        return None
    path, q, query = name.partition("?")
    head, slash, _ = path.rpartition("/")
    if not slash or head.count("/") < 3:  # "xdstp://auth" only: no type
        return None
    return f"{head}/*{q}{query}"


def expand_listener_template(template: str, target: str) -> str:
    """Replace ``%s`` in a listener name template with ``target`` (A47).

    When the template is an ``xdstp:`` name, ``target`` is percent-encoded
    first, so that it stays one valid URI path.
    """
    if template.startswith(XDSTP_SCHEME):
        target = percent_encode_path(target)
        return normalize_name(template.replace("%s", target))
    return template.replace("%s", target)


def listener_name_for_target(
    target: str,
    *,
    default_template: str = "%s",
    authority_templates: Mapping[str, str | None] | None = None,
) -> str:
    """The Listener name a gRPC client would subscribe to for ``xds:`` ``target`` (A47).

    ``xds:///svc`` or ``xds:svc`` use ``default_template``; ``xds://auth/svc``
    uses the template of authority ``auth`` (from ``authority_templates``,
    defaulting to ``xdstp://auth/envoy.config.listener.v3.Listener/%s``) and
    raises :class:`ResourceNameError` when the authority is not configured.
    """
    templates = authority_templates or {}
    if target.startswith("xds://"):
        authority, _, path = target[len("xds://") :].partition("/")
        if authority:
            if authority not in templates:
                raise ResourceNameError(
                    target, f"authority {authority!r} is not in the bootstrap's authorities"
                )
            template = (
                templates[authority] or f"{_PREFIX}{authority}/envoy.config.listener.v3.Listener/%s"
            )
            return expand_listener_template(template, path)
        target = path
    elif target.startswith("xds:"):
        target = target[len("xds:") :]
    return expand_listener_template(default_template, target.lstrip("/"))
