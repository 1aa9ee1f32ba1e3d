"""(validate.rules) where Python's reading differs from PGV's C++ code in Envoy (#25)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.base_pb2 import HeaderValue
from envoy.config.core.v3.health_check_pb2 import HealthCheck
from envoy.config.core.v3.protocol_pb2 import UpstreamHttpProtocolOptions
from envoy.type.v3.percent_pb2 import Percent
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.any_pb2 import Any as AnyProto
from validate import validate_pb2 as pgv

from xds_client.protocol._rules import check_rules

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _probe_class(package: str, rules: dict[str, str]) -> Any:
    """A message type ``<package>.Probe`` with one string field per ``rules`` entry,
    each with that ``(validate.rules).string.pattern``, added to the default pool."""
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{package.replace('.', '/')}/probe.proto",
        package=package,
        syntax="proto3",
        dependency=["validate/validate.proto"],
    )
    message = file.message_type.add(name="Probe")
    for number, (name, pattern) in enumerate(rules.items(), start=1):
        field = message.field.add(
            name=name,
            number=number,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
        field.options.Extensions[pgv.rules].string.pattern = pattern
    descriptor_pool.Default().Add(file)
    desc = descriptor_pool.Default().FindMessageTypeByName(f"{package}.Probe")
    return message_factory.GetMessageClass(desc)


Probe = _probe_class(
    "xdsclienttest.rules.edges",
    {"lower": "^[a-z]+$", "anchored": r"\Aab\z", "digits": "^[[:digit:]]+$", "letters": r"^\pL+$"},
)


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("lower", "abc", True),
        ("lower", "abc\n", False),  # RE2's $ is the end of the text
        ("anchored", "ab", True),  # \z is RE2 (Python's re has no \z)
        ("anchored", "abc", False),
        ("digits", "123", True),
        ("digits", "12a", False),
        ("letters", "éa", True),
        ("letters", "a1", False),
    ],
)
def test_pattern_rules_are_read_by_re2(field: str, value: str, ok: bool) -> None:
    fine = {"lower": "abc", "anchored": "ab", "digits": "1", "letters": "a"}
    reason = check_rules(Probe(**{**fine, field: value}))
    assert (reason is None) is ok, reason


@pytest.mark.parametrize(
    ("value", "ok"),
    [("service.internal", True), ("service.internal\n", False), ("a\tb", True)],
)
def test_header_value_rule_refuses_a_trailing_newline(value: str, ok: bool) -> None:
    check = HealthCheck.HttpHealthCheck(path="/healthz", host=value)
    reason = check_rules(check)
    assert (reason is None) is ok, reason
    if not ok:
        assert reason is not None
        assert "host" in reason
        assert "header value" in reason


@pytest.mark.parametrize(("value", "ok"), [("x-a", True), ("x,y", True), ("x-a\n", False)])
def test_strict_header_name_class_holds_comma(value: str, ok: bool) -> None:
    # PGV's class is [0-9a-zA-Z!#$%&'*+-.^_|~`]: '+-.' is a range, ',' is in it.
    reason = check_rules(UpstreamHttpProtocolOptions(override_auto_sni_header=value))
    assert (reason is None) is ok, reason


def test_loose_header_rule_refuses_a_trailing_newline() -> None:
    assert check_rules(HeaderValue(key="x-a", value="v")) is None
    reason = check_rules(HeaderValue(key="x-a", value="v\n"))
    assert reason is not None
    assert reason.startswith("value:")


@pytest.mark.parametrize(
    ("value", "ok"), [(50.0, True), (math.nan, True), (100.5, False), (-1.0, False)]
)
def test_nan_passes_a_bounded_double_as_in_envoy(value: float, ok: bool) -> None:
    # Envoy's generated check is `if (v < 0 || v > 100) reject`: false for NaN.
    reason = check_rules(Percent(value=value))
    assert (reason is None) is ok, reason


def test_nan_passes_a_bounded_double_inside_a_cluster() -> None:
    cluster = Cluster(name="c")
    cluster.connect_timeout.FromSeconds(1)
    cluster.common_lb_config.healthy_panic_threshold.value = math.nan
    assert check_rules(cluster) is None


def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_extension_payloads_are_checked_in_a_process_that_never_imported_them() -> None:
    # A Listener whose HttpConnectionManager (in an Any) has an empty stat_prefix,
    # which its rules refuse (min_len 1); the checking process imports only the
    # Listener's module, as a plain client does.
    from envoy.config.listener.v3.listener_pb2 import Listener
    from envoy.extensions.filters.network.http_connection_manager.v3 import (
        http_connection_manager_pb2 as hcm,
    )

    listener = Listener(name="l")
    listener.address.socket_address.address = "127.0.0.1"
    listener.address.socket_address.port_value = 80
    manager = hcm.HttpConnectionManager(stat_prefix="")
    manager.rds.route_config_name = "r"
    manager.rds.config_source.ads.SetInParent()
    chain = listener.filter_chains.add()
    chain.filters.add(name="hcm").typed_config.Pack(manager)
    data = listener.SerializeToString().hex()
    out = _run(
        f"""
        import sys
        from envoy.config.listener.v3.listener_pb2 import Listener
        from xds_client.protocol._rules import check_rules
        package = "envoy.extensions.filters.network.http_connection_manager.v3"
        assert package + ".http_connection_manager_pb2" not in sys.modules
        print(check_rules(Listener.FromString(bytes.fromhex("{data}"))))
        """
    )
    assert "stat_prefix" in out, out


def test_an_unknown_payload_type_is_checked_once_its_module_is_loaded() -> None:
    package = "xdsclienttest.rules.later"
    any_value = AnyProto(type_url=f"type.googleapis.com/{package}.Probe", value=b"")
    cluster = Cluster(name="c")
    cluster.connect_timeout.FromSeconds(1)
    cluster.transport_socket.name = "t"
    # The empty payload's "lower" is "", which ^[a-z]+$ refuses once the type is known.
    cluster.transport_socket.typed_config.CopyFrom(any_value)
    assert check_rules(cluster) is None  # unknown type: not ours to judge
    _probe_class(package, {"lower": "^[a-z]+$"})
    reason = check_rules(cluster)
    assert reason is not None
    assert "lower" in reason, reason


def test_rules_envoy_has_and_the_installed_descriptors_lack_are_checked() -> None:
    from envoy.config.route.v3.route_pb2 import RouteConfiguration

    from xds_client.protocol._rules import missing_envoy_rules

    # Envoy 1.40 NACKs these (RouteConfigurationValidationError.VhostHeader); the
    # interop test sees it. xds-protos 1.85's descriptor carries no rule there.
    assert "envoy.config.route.v3.RouteConfiguration.vhost_header" in missing_envoy_rules()
    assert check_rules(RouteConfiguration(name="r", vhost_header="x-host")) is None
    for bad in ("x-host\n", "a\rb"):
        reason = check_rules(RouteConfiguration(name="r", vhost_header=bad))
        assert reason is not None
        assert reason.startswith("vhost_header:"), reason
