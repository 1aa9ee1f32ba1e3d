"""gRPC's xDS bootstrap format: servers, their credentials and features, the node.

Read from the file named by ``GRPC_XDS_BOOTSTRAP``, else from the JSON in
``GRPC_XDS_BOOTSTRAP_CONFIG``. Unknown fields are ignored, as gRPC does; a
field that is present but wrong gives a :class:`BootstrapError` naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envoy.config.core.v3.base_pb2 import Node as NodeProto
from google.protobuf import json_format

from xds_client._version import __version__
from xds_client.errors import BootstrapError
from xds_client.federation import ResourceNameError, listener_name_for_target, parse_xdstp
from xds_client.node import CLIENT_FEATURES, USER_AGENT_NAME
from xds_client.transport import ChannelCredentialsConfig, ServerTarget

from ._authorities import Authority
from ._credentials import call_credentials_from_bootstrap

# json and the call-credential helpers load when a bootstrap is parsed:
# every client imports this module, few read a bootstrap file.

__all__ = [
    "BOOTSTRAP_CONFIG_ENV",
    "BOOTSTRAP_ENV",
    "Bootstrap",
    "load_bootstrap",
    "parse_bootstrap",
]

BOOTSTRAP_ENV = "GRPC_XDS_BOOTSTRAP"
BOOTSTRAP_CONFIG_ENV = "GRPC_XDS_BOOTSTRAP_CONFIG"
SUPPORTED_CHANNEL_CREDS = ("insecure", "tls")


@dataclass(frozen=True, slots=True, kw_only=True)
class Bootstrap:
    """What a bootstrap file configures."""

    servers: tuple[ServerTarget, ...]
    """``xds_servers`` in priority order (later ones are fallbacks)."""
    node: NodeProto | None
    """The ``node`` object, or None when the file has none."""
    authorities: Mapping[str, Authority] = field(default_factory=dict)
    """gRFC A47 ``authorities``: the servers of each ``xdstp://`` authority."""
    client_default_listener_resource_name_template: str = "%s"
    """gRFC A47: the Listener name for an ``xds:`` target without an authority."""

    def listener_name(self, target: str) -> str:
        """The Listener name to watch for a gRPC target such as ``xds:///svc`` (gRFC A47).

        Raises :class:`~xds_client.federation.ResourceNameError` when the target
        names an authority the bootstrap does not list.
        """
        return listener_name_for_target(
            target,
            default_template=self.client_default_listener_resource_name_template,
            authority_templates={
                name: a.client_listener_resource_name_template
                for name, a in self.authorities.items()
            },
        )


def _expect(value: Any, kind: type | tuple[type, ...], field: str) -> Any:
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        shown = {"dict": "object", "list": "array", "str": "string"}.get(names, names)
        raise BootstrapError(f"must be a JSON {shown}, got {type(value).__name__}", field=field)
    return value


def _tls(config: Mapping[str, Any], field: str) -> ChannelCredentialsConfig:
    _expect(config, dict, field)
    paths: dict[str, str | None] = {}
    for key in ("ca_certificate_file", "certificate_file", "private_key_file"):
        value = config.get(key)
        if value is not None:
            _expect(value, str, f"{field}.{key}")
            if not os.path.isfile(value):
                raise BootstrapError(f"file {value!r} does not exist", field=f"{field}.{key}")
        paths[key] = value
    if "refresh_interval" in config:
        # A65: how often gRPC's file watcher re-reads; we re-read when the files change.
        interval = _expect(config["refresh_interval"], str, f"{field}.refresh_interval")
        if not interval.endswith("s"):
            raise BootstrapError(
                "must be a duration such as '600s'", field=f"{field}.refresh_interval"
            )
    if (paths["certificate_file"] is None) != (paths["private_key_file"] is None):
        raise BootstrapError(
            "certificate_file and private_key_file go together (mTLS)", field=field
        )
    return ChannelCredentialsConfig(
        ca_certificate=paths["ca_certificate_file"],
        certificate_chain=paths["certificate_file"],
        private_key=paths["private_key_file"],
    )


def _server(raw: Any, field: str, memo: dict[str, ServerTarget] | None = None) -> ServerTarget:
    # A47: one server listed by several authorities is one channel. Equal JSON gives the
    # same target object, so even call credentials (compared by identity) match.
    key = json.dumps(raw, sort_keys=True, default=str) if memo is not None else ""
    if memo is not None and key in memo:
        return memo[key]
    target = _parse_server(raw, field)
    if memo is not None:
        memo[key] = target
    return target


def _parse_server(raw: Any, field: str) -> ServerTarget:
    _expect(raw, dict, field)
    uri = raw.get("server_uri")
    if uri is None:
        raise BootstrapError("is required", field=f"{field}.server_uri")
    if not isinstance(uri, str) or not uri:
        raise BootstrapError("must be a non-empty string", field=f"{field}.server_uri")
    creds_list = _expect(raw.get("channel_creds", []), list, f"{field}.channel_creds")
    credentials: ChannelCredentialsConfig | None = None
    chosen = False
    for i, creds in enumerate(creds_list):
        cfield = f"{field}.channel_creds[{i}]"
        _expect(creds, dict, cfield)
        kind = _expect(creds.get("type"), str, f"{cfield}.type")
        if kind not in SUPPORTED_CHANNEL_CREDS:
            continue  # gRPC uses the first type it supports
        if kind == "tls":
            credentials = _tls(creds.get("config", {}), f"{cfield}.config")
        chosen = True
        break
    if not chosen:
        kinds = [c.get("type") for c in creds_list if isinstance(c, dict)]
        hint = (
            "; google_default needs Google auth libraries that grpcio does not offer"
            if "google_default" in kinds
            else ""
        )
        raise BootstrapError(
            f"no supported channel credentials (supported: {', '.join(SUPPORTED_CHANNEL_CREDS)})"
            + hint,
            field=f"{field}.channel_creds",
        )
    features = _expect(raw.get("server_features", []), list, f"{field}.server_features")
    for i, feature in enumerate(features):
        _expect(feature, str, f"{field}.server_features[{i}]")
    call_credentials = None
    if "call_creds" in raw:
        call_credentials = call_credentials_from_bootstrap(raw["call_creds"], f"{field}.call_creds")
    return ServerTarget(
        uri,
        credentials=credentials,
        call_credentials=call_credentials,
        server_features=frozenset(features),
    )


def _node(raw: Any) -> NodeProto:
    _expect(raw, dict, "node")
    for key in ("id", "cluster"):
        if key in raw:
            _expect(raw[key], str, f"node.{key}")
    if "locality" in raw:
        _expect(raw["locality"], dict, "node.locality")
    if "metadata" in raw:
        _expect(raw["metadata"], dict, "node.metadata")

    node = NodeProto()
    try:
        json_format.ParseDict(raw, node, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise BootstrapError(str(exc), field="node") from exc
    # As gRPC: the client says who it is and what it supports; the file cannot.
    node.user_agent_name = USER_AGENT_NAME
    node.user_agent_version = __version__
    del node.client_features[:]
    node.client_features.extend(CLIENT_FEATURES)
    return node


def _template(value: Any, field: str, authority: str | None) -> str:
    _expect(value, str, field)
    if authority is not None and not value.startswith(f"xdstp://{authority}/"):
        raise BootstrapError(f"must start with 'xdstp://{authority}/' (gRFC A47)", field=field)
    if value.startswith("xdstp:"):
        try:
            parse_xdstp(value.replace("%s", "x"))
        except ResourceNameError as exc:
            raise BootstrapError(exc.reason, field=field) from exc
    return str(value)


def _authorities(raw: Any, memo: dict[str, ServerTarget]) -> dict[str, Authority]:
    _expect(raw, dict, "authorities")
    out: dict[str, Authority] = {}
    for name, entry in raw.items():
        field = f"authorities[{name!r}]"
        _expect(entry, dict, field)
        servers: tuple[ServerTarget, ...] = ()
        if "xds_servers" in entry:
            raw_servers = _expect(entry["xds_servers"], list, f"{field}.xds_servers")
            # A47: an empty or absent list means the top-level servers.
            servers = tuple(
                _server(s, f"{field}.xds_servers[{i}]", memo) for i, s in enumerate(raw_servers)
            )
        template = None
        if "client_listener_resource_name_template" in entry:
            template = _template(
                entry["client_listener_resource_name_template"],
                f"{field}.client_listener_resource_name_template",
                name,
            )
        reachability_only = entry.get("fallback_on_reachability_only", False)
        _expect(reachability_only, bool, f"{field}.fallback_on_reachability_only")
        out[name] = Authority(servers, template, reachability_only)
    return out


def parse_bootstrap(data: str | bytes | Mapping[str, Any]) -> Bootstrap:
    """Parse bootstrap JSON (text or an already decoded object)."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise BootstrapError(f"not valid JSON: {exc}") from exc
    root = _expect(data, dict, "(root)")
    raw_servers = root.get("xds_servers")
    if raw_servers is None:
        raise BootstrapError("is required", field="xds_servers")
    _expect(raw_servers, list, "xds_servers")
    if not raw_servers:
        raise BootstrapError("must list at least one server", field="xds_servers")
    memo: dict[str, ServerTarget] = {}
    servers = tuple(_server(s, f"xds_servers[{i}]", memo) for i, s in enumerate(raw_servers))
    node = _node(root["node"]) if "node" in root else None
    authorities = _authorities(root["authorities"], memo) if "authorities" in root else {}
    default_template = "%s"
    key = "client_default_listener_resource_name_template"
    if key in root:
        default_template = _template(root[key], key, None)
    return Bootstrap(
        servers=servers,
        node=node,
        authorities=authorities,
        client_default_listener_resource_name_template=default_template,
    )


def _parse_from(text: str, source: str) -> Bootstrap:
    """:func:`parse_bootstrap`, with errors that name where the JSON came from."""
    try:
        return parse_bootstrap(text)
    except BootstrapError as exc:
        named = BootstrapError(f"{source}: {exc}")
        named.field = exc.field
        raise named from exc


def load_bootstrap(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> Bootstrap:
    """Read a bootstrap from ``path``, ``$GRPC_XDS_BOOTSTRAP`` or ``$GRPC_XDS_BOOTSTRAP_CONFIG``."""
    env = os.environ if environ is None else environ
    if path is None:
        path = env.get(BOOTSTRAP_ENV) or None
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise BootstrapError(f"cannot read bootstrap file {os.fspath(path)!r}: {exc}") from exc
        return _parse_from(text, f"bootstrap file {os.fspath(path)!r}")
    config = env.get(BOOTSTRAP_CONFIG_ENV)
    if config:
        return _parse_from(config, f"${BOOTSTRAP_CONFIG_ENV}")
    raise BootstrapError(
        f"no bootstrap: pass a path, or set {BOOTSTRAP_ENV} (a file) "
        f"or {BOOTSTRAP_CONFIG_ENV} (JSON)"
    )
