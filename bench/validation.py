"""What checking ``(validate.rules)`` costs: a SotW push of N new clusters, rules on vs off.

Measured in the sans-I/O core, where the check runs (no network, no threads):
``SotwProtocol.receive`` of one response holding N new bench clusters (about 570
bytes each, with a TLS ``Any`` whose payload is checked too), parsed the way the
gRPC driver parses it (raw ``Any`` bytes). "SDK" is ``validate_rules=True`` (the
default), "raw" the same push with ``validate_rules=False``. A second row is the
re-push of the same bytes, which must stay free: unchanged resources are not
decoded, so not checked. The time is this process's CPU time (the core is
single-threaded and does no I/O), so other processes on a shared machine weigh
less than on a wall clock.

Run alone with ``python -m bench.validation``.
"""

from __future__ import annotations

import sys
import time
from typing import cast

from bench._data import CDS, NODE_ID, make_cluster
from bench._harness import Config, Row, median, ratio_at_most


def _response_bytes(count: int) -> bytes:
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

    response = DiscoveryResponse(type_url=CDS, version_info="1", nonce="n1")
    for i in range(count):
        response.resources.add().Pack(make_cluster(i))
    data: bytes = response.SerializeToString()
    return data


def _push_once(data: bytes, *, rules: bool, repush: bool) -> float:
    from envoy.config.core.v3.base_pb2 import Node

    from xds_client.protocol import ProtocolConfig, SotwProtocol
    from xds_client.protocol._raw import RawDiscoveryResponse, raw_response_class

    raw_class = raw_response_class()

    def parse(data: bytes) -> RawDiscoveryResponse:
        return cast("RawDiscoveryResponse", raw_class.FromString(data))

    config = ProtocolConfig(
        node=Node(id=NODE_ID), does_not_exist_timeout=None, validate_rules=rules
    )
    core = SotwProtocol(config)
    core.subscribe(CDS, None)
    core.connected(0.0)
    for request in core.requests_to_send():
        core.request_sent(request, 0.0)
    if repush:
        core.receive(parse(data), 0.0)
        for request in core.requests_to_send():
            core.request_sent(request, 0.0)
    response = parse(data)
    start = time.process_time()
    core.receive(response, 0.0)
    return time.process_time() - start


def run(server: object, cfg: Config) -> list[Row]:
    """Rows for ``python -m bench`` (``server`` is unused: this runs in-process)."""
    count = cfg.sotw_clusters
    data = _response_bytes(count)
    rows: list[Row] = []
    for repush, label in ((False, "push"), (True, "re-push (same bytes)")):
        on: list[float] = []
        off: list[float] = []
        for _ in range(cfg.reps):
            off.append(_push_once(data, rules=False, repush=repush))
            on.append(_push_once(data, rules=True, repush=repush))
        rows.append(
            Row(
                scenario=f"SotW {label} of {count:,} new clusters, (validate.rules) on vs off",
                metric="core receive",
                unit="s",
                sdk=median(on),
                raw=median(off),
                # Validation may add 10% to a push of new resources; a re-push stays free.
                target="<= 1.1x off",
                check=ratio_at_most(1.1),
                note="raw = validate_rules=False; the core only, no I/O",
                samples_sdk=on,
                samples_raw=off,
            )
        )
    return rows


def main() -> int:
    cfg = Config.smoke_config() if "--smoke" in sys.argv else Config()
    for row in run(None, cfg):
        ratio = f"{row.ratio:.2f}x" if row.ratio is not None else "-"
        print(f"{row.scenario}: on {row.sdk:.3f} s, off {row.raw:.3f} s, {ratio} ({row.target})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
