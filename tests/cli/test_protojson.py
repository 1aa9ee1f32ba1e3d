"""Proto JSON of the command line: Any types imported on demand, secrets blanked."""

from __future__ import annotations

import json
import subprocess
import sys

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.extension_pb2 import TypedExtensionConfig
from google.protobuf.any_pb2 import Any as AnyProto

from xds_client.client._protojson import resolve_any_types
from xds_client.client._protojson import to_dict as message_to_dict
from xds_client.testing._resource_file import parse_resources


def test_unknown_any_type_is_marked_not_fatal() -> None:
    config = TypedExtensionConfig(name="x")
    config.typed_config.CopyFrom(AnyProto(type_url="type.googleapis.com/no.such.Thing", value=b"1"))
    assert resolve_any_types(config) == ["type.googleapis.com/no.such.Thing"]
    doc = message_to_dict(config)
    assert doc == {
        "name": "x",
        "typed_config": {
            "@type": "type.googleapis.com/google.protobuf.Struct",
            "value": {"@type": "type.googleapis.com/no.such.Thing", "@unresolved": True},
        },
    }


def test_any_module_is_imported_on_demand() -> None:
    # A fresh interpreter, where the TLS modules are surely not imported yet.
    code = """
import json, sys
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from google.protobuf.any_pb2 import Any
from xds_client.client._protojson import to_dict as message_to_dict
assert "envoy.extensions.transport_sockets.tls.v3.tls_pb2" not in sys.modules
tls = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
c = Cluster(name="c")
c.transport_socket.typed_config.CopyFrom(Any(type_url=tls, value=b"\\x20\\x01"))
print(json.dumps(message_to_dict(c)))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["transport_socket"]["typed_config"]["@type"].endswith("UpstreamTlsContext")


def test_resource_file_with_nested_any() -> None:
    # The loader imports the module of an Any's "@type" before parsing (a fix for serve).
    loaded = parse_resources(
        json.dumps(
            {
                "resources": [
                    {
                        "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                        "name": "c",
                        "typed_extension_protocol_options": {
                            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                                "@type": "type.googleapis.com/envoy.extensions.upstreams"
                                ".http.v3.HttpProtocolOptions",
                                "explicit_http_config": {"http2_protocol_options": {}},
                            }
                        },
                    }
                ]
            }
        ),
        fmt="json",
    )
    (cluster,) = loaded.resources["type.googleapis.com/envoy.config.cluster.v3.Cluster"].values()
    assert isinstance(cluster, Cluster)
    assert cluster.typed_extension_protocol_options[
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    ].type_url.endswith("HttpProtocolOptions")
