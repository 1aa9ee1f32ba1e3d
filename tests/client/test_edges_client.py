"""Client-side protocol edges of issue #13: bootstrap node, connect timeout, fallback state."""

from __future__ import annotations

from xds_client import __version__
from xds_client.client._bootstrap import parse_bootstrap
from xds_client.node import CLIENT_FEATURES, USER_AGENT_NAME


def test_bootstrap_cannot_override_client_features_or_user_agent() -> None:
    boot = parse_bootstrap(
        {
            "xds_servers": [{"server_uri": "127.0.0.1:1", "channel_creds": [{"type": "insecure"}]}],
            "node": {
                "id": "n",
                "user_agent_name": "pretender",
                "client_features": ["envoy.lb.does_not_support_overprovisioning", "made-up"],
            },
        }
    )
    assert boot.node is not None
    assert boot.node.id == "n"
    assert boot.node.user_agent_name == USER_AGENT_NAME
    assert boot.node.user_agent_version == __version__
    assert list(boot.node.client_features) == list(CLIENT_FEATURES)


def test_each_connection_attempt_gets_grpcs_20s_minimum_connect_timeout() -> None:
    # gRPC's grpc.min_reconnect_backoff_ms is the MIN_CONNECT_TIMEOUT of its
    # connection-backoff spec: capping it at our 1 s initial backoff meant a slow
    # handshake (TLS over a long path) could never complete.
    from xds_client import Backoff
    from xds_client.client._options import build_options
    from xds_client.client._session import Session

    session = Session(build_options(["127.0.0.1:1"], backoff=Backoff(initial=0.2, maximum=3)))
    options = dict(session.target(0).channel_options)
    assert options["grpc.initial_reconnect_backoff_ms"] == 200
    assert int(options.get("grpc.min_reconnect_backoff_ms", 20_000)) >= 20_000


def test_a_fallback_server_is_not_sent_the_primarys_version() -> None:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse

    from xds_client.client._options import build_options
    from xds_client.client._session import OpenStream, SendRequest, Session
    from xds_client.client._watchers import EventBuffer
    from xds_client.resources import CLUSTER, resource_type

    s = Session(build_options(["p:1", "s:1"]))
    # "b" never comes, so the client has reason to fall back (A71).
    s.add_watch(resource_type(CLUSTER), frozenset({"a", "b"}), EventBuffer(10), None, 0.0)
    s.step(0.0)
    response = DiscoveryResponse(version_info="7", type_url=CLUSTER, nonce="n7")
    response.resources.add().Pack(Cluster(name="a"))
    s.on_response("ads", 1, response, 0.1)
    s.step(0.1)  # the ACK
    s.on_failure("ads", 1, RuntimeError("closed"), 0.2)  # after a response: same server
    s.step(0.2)
    s.on_failure("ads", 2, RuntimeError("refused"), 0.3)  # before any: the fallback
    actions = s.step(0.3)
    (opened,) = [a for a in actions if isinstance(a, OpenStream)]
    assert opened.server == 1
    (hello,) = [a.request for a in actions if isinstance(a, SendRequest)]
    assert isinstance(hello, DiscoveryRequest)
    assert hello.version_info == ""  # "7" came from the primary


def test_no_fallback_when_every_watched_resource_is_cached() -> None:
    # gRFC A71: with everything cached the client keeps using it and retries the
    # primary with backoff instead of switching servers.
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

    from xds_client.client._options import build_options
    from xds_client.client._session import OpenStream, Session
    from xds_client.client._watchers import EventBuffer
    from xds_client.resources import CLUSTER, resource_type

    s = Session(build_options(["p:1", "s:1"]))
    s.add_watch(resource_type(CLUSTER), frozenset({"a"}), EventBuffer(10), None, 0.0)
    s.step(0.0)
    response = DiscoveryResponse(version_info="7", type_url=CLUSTER, nonce="n7")
    response.resources.add().Pack(Cluster(name="a"))
    s.on_response("ads", 1, response, 0.1)
    s.step(0.1)
    s.on_failure("ads", 1, RuntimeError("closed"), 0.2)
    s.step(0.2)
    s.on_failure("ads", 2, RuntimeError("refused"), 0.3)  # before any response
    assert [a for a in s.step(0.3) if isinstance(a, OpenStream)] == []  # backing off
    wake = s.next_wakeup()
    assert wake is not None
    (opened,) = [a for a in s.step(wake) if isinstance(a, OpenStream)]
    assert opened.server == 0  # still the primary


def test_server_features_are_the_current_servers() -> None:
    from xds_client.client._options import build_options
    from xds_client.client._session import Session
    from xds_client.client._watchers import EventBuffer
    from xds_client.resources import CLUSTER, resource_type
    from xds_client.transport import ServerTarget

    secondary = ServerTarget(
        "s:1", server_features=frozenset({"ignore_resource_deletion", "fail_on_data_errors"})
    )
    s = Session(build_options([ServerTarget("p:1"), secondary]))
    s.add_watch(resource_type(CLUSTER), frozenset({"a"}), EventBuffer(10), None, 0.0)
    s.step(0.0)
    protocol = s._slots["ads"].protocol
    assert not protocol.config.ignore_resource_deletion
    s.on_failure("ads", 1, RuntimeError("refused"), 0.1)  # nothing cached: fall back
    s.step(0.1)
    assert protocol.config.ignore_resource_deletion
    assert protocol.config.fail_on_data_errors
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

    from xds_client.client._session import OpenStream

    response = DiscoveryResponse(version_info="1", type_url=CLUSTER, nonce="n1")
    response.resources.add().Pack(Cluster(name="a"))
    s.on_probe("ads", 1, True, 0.12)  # the fallback's own readiness probe
    s.on_response("ads", 2, response, 0.15)  # the fallback serves
    trials: list[OpenStream] = []
    t = 0.2
    while not trials and t < 5:
        trials = [a for a in s.step(t) if isinstance(a, OpenStream)]
        t += 0.25
    (trial,) = trials  # the primary's xDS stream, tried alongside (A71)
    assert trial.server == 0
    assert protocol.config.ignore_resource_deletion  # still the fallback's until it answers
    s.on_response(trial.slot, trial.attempt, response, t)  # the primary is back
    assert not protocol.config.ignore_resource_deletion
    assert not protocol.config.fail_on_data_errors
