"""Envoy 1.40 as the oracle of filter-chain selection and validation, on random listeners.

Each seed draws a listener (see ``_chains_generative``): two thirds are "clean" (chains
kept only while ``check_filter_chains`` accepts the listener), a third take anything,
values Envoy rejects included (partial wildcards, ``destination_port: 0``,
``address_suffix``, ``prefix_len`` over 128, repeated values). The listener goes to
Envoy through the ControlPlane: Envoy's ACK or NACK must equal
``check_filter_chains(listener) == []``. When Envoy accepts, random connections from
127.0.0.0/8 (and ::1), plain or opening with a TLS ClientHello (SNI, ALPN), go to it,
and the chain that answers must be the one ``select_filter_chain`` picks.

``XDS_CLIENT_GENERATIVE_SEEDS`` sets the number of seeds (default 15, about 10 s);
``XDS_CLIENT_GENERATIVE_FIRST_SEED`` the first one.

Not driven here (this host cannot make Envoy see it): a destination or source
outside 127.0.0.0/8 and ::1, a direct source differing from the source (that needs
the PROXY protocol), ALPN or SNI without TLS, and ``use_original_dst``.
"""

from __future__ import annotations

import functools
import os
import random
import socket
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.listener.v3.listener_pb2 import Listener
from google.protobuf import text_format
from google.protobuf.duration_pb2 import Duration

from xds_client.graph import check_filter_chains, select_filter_chain
from xds_client.resources import CLUSTER, LISTENER
from xds_client.testing import ControlPlane

from ._chains_generative import Probe, World, drive, random_listener, random_probe
from ._interop_helpers import free_port, poll_until, serve_and_answer
from .test_envoy import envoy_factory  # noqa: F401 - the fixture

pytestmark = [pytest.mark.interop, pytest.mark.envoy, pytest.mark.timeout(600)]

SEEDS = int(os.environ.get("XDS_CLIENT_GENERATIVE_SEEDS", "15"))
FIRST_SEED = int(os.environ.get("XDS_CLIENT_GENERATIVE_FIRST_SEED", "0"))
PROBES = 24


def placeholder_cluster() -> Cluster:
    # Envoy holds LDS back until its first CDS answer: give it one cluster.
    return Cluster(name="unused", type=Cluster.STATIC, connect_timeout=Duration(seconds=1))


def listening(port: int) -> bool | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            return None
    return True


def probes(rng: random.Random, world: World) -> list[Probe]:
    """PROBES connections, never the same four-tuple twice (Envoy closes first, so its
    side holds TIME_WAIT for a fixed source port)."""
    found: list[Probe] = []
    used: set[tuple[Any, ...]] = set()
    while len(found) < PROBES:
        probe = random_probe(rng, world)
        key = (probe.destination, probe.source_ip, probe.source_port)
        if probe.source_port and key in used:
            continue
        used.add(key)
        found.append(probe)
    return found


def test_random_listeners_agree_with_envoy(envoy_factory: Any) -> None:  # noqa: F811
    verdict_mismatches: list[tuple[int, bool, list[str], str]] = []
    choice_mismatches: list[tuple[int, Probe, str, str]] = []
    accepted = rejected = connections = 0
    answers: set[str] = set()
    shown: dict[int, Listener] = {}
    with ControlPlane() as cp:
        cp.set_snapshot({CLUSTER: [placeholder_cluster()]}, version="0")
        envoy_factory(cp, "GRPC")
        cp.wait_for_ack(CLUSTER, "0", timeout=20)
        for seed in range(FIRST_SEED, FIRST_SEED + SEEDS):
            rng = random.Random(seed)
            world = World(free_port(), free_port(), free_port(), [free_port() for _ in range(3)])
            listener = random_listener(rng, world, f"gen{seed}", clean=seed % 3 != 0)
            ours = check_filter_chains(listener)
            version = f"s{seed}"
            reply = serve_and_answer(cp, LISTENER, listener, version)
            shown[seed] = Listener(filter_chains=listener.filter_chains)
            if reply.is_ack != (ours == []):
                detail = reply.error_detail.message if reply.error_detail is not None else ""
                verdict_mismatches.append((seed, reply.is_ack, ours, detail))
            if not reply.is_ack:
                rejected += 1
                continue
            accepted += 1
            port = world.port1
            poll_until(functools.partial(listening, port), 20, f"listener gen{seed}")
            for probe in probes(rng, world):
                theirs, connection = drive(probe)
                try:
                    choice = select_filter_chain(listener, connection)
                    mine = "(closed)" if choice is None else choice.name
                except ValueError as exc:  # counted, so a run reports every kind of miss
                    mine = f"(error: {exc})"
                connections += 1
                answers.add(theirs)
                if theirs != mine:
                    choice_mismatches.append((seed, probe, theirs, mine))
    summary = (
        f"{SEEDS} listeners ({accepted} accepted, {rejected} rejected by Envoy), "
        f"{connections} connections, {len(verdict_mismatches)} verdict and "
        f"{len(choice_mismatches)} choice disagreements"
    )
    print(summary)
    for seed, *rest in verdict_mismatches[:3] + choice_mismatches[:3]:
        print(seed, rest, text_format.MessageToString(shown[seed]))
    assert verdict_mismatches == [], summary
    assert choice_mismatches == [], summary
    if SEEDS >= 10:
        # The run must exercise both verdicts and more than one chain.
        assert accepted, summary
        assert rejected, summary
        assert len(answers) > 3, (summary, answers)
