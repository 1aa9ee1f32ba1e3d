"""Loading resources from Envoy filesystem-subscription style YAML and JSON files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment

from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, RESOURCE_WRAPPER_TYPE_URL
from xds_client.testing import ControlPlane, ResourceFileError, load_resources

MIXED = f"""\
version_info: "42"
resources:
- "@type": {CLUSTER}
  name: backend
  connect_timeout: 1.5s
  type: EDS
- "@type": {ENDPOINT}
  cluster_name: backend
  endpoints:
  - lb_endpoints:
    - endpoint:
        address:
          socket_address: {{address: 127.0.0.1, port_value: 8080}}
- "@type": {RESOURCE_WRAPPER_TYPE_URL}
  name: wrapped
  resource:
    "@type": {LISTENER}
    name: wrapped
"""


def test_yaml_with_mixed_types(tmp_path: Path) -> None:
    path = tmp_path / "resources.yaml"
    path.write_text(MIXED)
    loaded = load_resources(path)
    assert loaded.version == "42"
    assert set(loaded.resources) == {CLUSTER, ENDPOINT, LISTENER}
    cluster = loaded.resources[CLUSTER]["backend"]
    assert isinstance(cluster, Cluster)
    assert cluster.connect_timeout.ToMilliseconds() == 1500
    assert cluster.type == Cluster.EDS
    cla = loaded.resources[ENDPOINT]["backend"]
    assert isinstance(cla, ClusterLoadAssignment)
    assert cla.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value == 8080
    assert list(loaded.resources[LISTENER]) == ["wrapped"]


def test_json_and_serving_a_file(tmp_path: Path) -> None:
    path = tmp_path / "resources.json"
    path.write_text(json.dumps({"resources": [{"@type": CLUSTER, "name": "a"}]}))
    with ControlPlane(rest_port=None, heartbeat_interval=None) as cp:
        version = cp.load_file(path, version="v1")
        assert version == "v1"
        assert list(cp.resources(CLUSTER)) == ["a"]
        assert cp.version("cds") == "v1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "expected a mapping with a 'resources:' list"),
        ("resources: [{name: x}]", r"resources\[0\]: each resource needs an '@type'"),
        ('resources: [{"@type": type.googleapis.com/nope.Nope}]', "unknown '@type'"),
        (f'resources: [{{"@type": {CLUSTER}, name: a, bogus: 1}}]', "bogus"),
        (f'resources: [{{"@type": {CLUSTER}}}]', "has no name"),
        (
            f'resources: [{{"@type": {CLUSTER}, name: a}}, {{"@type": {CLUSTER}, name: a}}]',
            "given twice",
        ),
        ("resources: [", "invalid YAML"),
    ],
)
def test_errors_name_the_entry(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ResourceFileError, match=message) as info:
        load_resources(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ResourceFileError, match="cannot read"):
        load_resources(tmp_path / "absent.yaml")


HCM = (
    "type.googleapis.com/"
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)


def test_nested_any_values_resolve(tmp_path: Path) -> None:
    path = tmp_path / "listener.yaml"
    path.write_text(
        f"""\
resources:
- "@type": {LISTENER}
  name: ingress
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": {HCM}
        stat_prefix: ingress
        rds: {{route_config_name: local, config_source: {{ads: {{}}}}}}
"""
    )
    listener = load_resources(path).resources[LISTENER]["ingress"]
    typed = listener.filter_chains[0].filters[0].typed_config  # type: ignore[attr-defined]
    assert typed.type_url.endswith("HttpConnectionManager")
    assert typed.value
