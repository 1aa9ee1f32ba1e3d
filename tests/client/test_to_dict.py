"""Public to_dict/to_json: proto JSON of a resource, Any decoded, secrets redacted."""

from __future__ import annotations

import importlib
import json
from typing import Any

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from google.protobuf.duration_pb2 import Duration

import xds_client
from xds_client import to_dict, to_json

SECRET = "-----BEGIN PRIVATE KEY----- never shown"


def _cluster() -> Cluster:
    # tls_pb2 has no stubs (not in tools/gen_stubs.py's closure).
    tls: Any = importlib.import_module("envoy.extensions.transport_sockets.tls.v3.tls_pb2")
    context = tls.UpstreamTlsContext()
    context.common_tls_context.tls_certificates.add().private_key.inline_string = SECRET
    cluster = Cluster(name="secure", connect_timeout=Duration(seconds=2))
    cluster.transport_socket.name = "envoy.transport_sockets.tls"
    cluster.transport_socket.typed_config.Pack(context)
    return cluster


def test_to_dict_decodes_any_and_redacts_inside_it() -> None:
    doc = to_dict(_cluster())
    assert doc["name"] == "secure"
    assert doc["connect_timeout"] == "2s"
    typed = doc["transport_socket"]["typed_config"]
    assert typed["@type"].endswith("UpstreamTlsContext")
    key = typed["common_tls_context"]["tls_certificates"][0]["private_key"]
    assert key == {"inline_string": "[redacted]"}
    assert SECRET not in json.dumps(doc)


def test_to_json_is_one_line_or_indented_and_can_show_secrets() -> None:
    line = to_json(_cluster())
    assert "\n" not in line
    assert json.loads(line) == to_dict(_cluster())
    assert to_json(Cluster(name="a"), indent=2) == '{\n  "name": "a"\n}'
    assert SECRET in to_json(_cluster(), redacted=False)


def test_exported_from_the_package() -> None:
    assert {"to_dict", "to_json"} <= set(xds_client.__all__)
    from xds_client.client import to_dict as from_client

    assert from_client is to_dict
