"""The example in docs/polling.md runs as written, over REST and over unary Fetch."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from xds_client.testing import ControlPlane

DOC = Path(__file__).resolve().parents[2] / "docs" / "polling.md"


@pytest.mark.timeout(60)
def test_example_fetches_over_rest() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], str(DOC), "exec"), namespace)
    with ControlPlane(heartbeat_interval=None) as cp:
        cp.set_resources("cds", [Cluster(name="backend", alt_stat_name="from-doc")])
        found = namespace["fetch_backend"](cp.rest_url)
    assert isinstance(found, Cluster)
    assert found.alt_stat_name == "from-doc"


def test_docs_are_linked_from_the_index() -> None:
    index = (DOC.parent / "index.md").read_text()
    assert "(polling.md)" in index
