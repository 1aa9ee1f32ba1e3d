"""The locustfile of tests/load/test_locust.py: three simulated clients per user.

Each worker reports every half second; the master quits as soon as Locust's total of
first configs reaches ``$XDS_LOAD_TEST_EXPECT`` (the test does not guess a duration).
At the end each worker writes how many clients it started to
``$XDS_LOAD_TEST_DIR/worker-PID.json``, so the test can add them up.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import locust.runners
from locust import events
from locust.runners import MasterRunner

from xds_client.load.locust import XdsUser, fleet_of, listen

locust.runners.WORKER_REPORT_INTERVAL = 0.5


class Proxies(XdsUser):
    clients_per_user = 3


_runner: dict[str, Any] = {}


def _quit_when_all_reported(client_id: str, data: Any, **_: Any) -> None:
    runner = _runner.get("runner")
    if not isinstance(runner, MasterRunner):
        return
    done = runner.stats.get("first config", "xDS").num_requests
    if done >= int(os.environ.get("XDS_LOAD_TEST_EXPECT", "0") or 1 << 30):
        runner.quit()


def _keep_runner(environment: Any, **_: Any) -> None:
    _runner["runner"] = environment.runner


def _count(environment: Any, **_: Any) -> None:
    fleet = fleet_of(Proxies)
    folder = os.environ.get("XDS_LOAD_TEST_DIR")
    if fleet is not None and folder:
        path = Path(folder) / f"worker-{os.getpid()}.json"
        path.write_text(json.dumps({"started": fleet.started}))


listen(events.worker_report, _quit_when_all_reported)
listen(events.init, _keep_runner)
listen(events.test_stop, _count)
