"""What every scenario shares: sizes, repetitions, medians, results and the table."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Config", "Row", "machine", "median", "render", "rss_bytes"]


@dataclass(frozen=True)
class Config:
    """Sizes and repetitions of a run; ``smoke()`` is the tiny one used by the tests."""

    reps: int = 5
    sotw_clusters: int = 10_000
    sotw_large: int = 100_000
    delta_updates: int = 10_000
    delta_names: int = 100
    rss_clusters: int = 100_000
    reconnect_resources: int = 100_000
    store_items: int = 100_000
    store_page: int = 500
    store_events: int = 10_000
    informer_items: int = 100_000
    graph_clusters: int = 1_000
    import_reps: int = 9
    smoke: bool = False

    @classmethod
    def smoke_config(cls) -> Config:
        return cls(
            reps=1,
            sotw_clusters=200,
            sotw_large=500,
            delta_updates=200,
            delta_names=10,
            rss_clusters=2_000,
            reconnect_resources=2_000,
            store_items=1_000,
            store_page=100,
            store_events=300,
            informer_items=1_000,
            graph_clusters=50,
            import_reps=1,
            smoke=True,
        )


Better = Literal["lower", "higher"]


@dataclass
class Row:
    """One line of the results table: medians of the SDK and the raw loop, and the target."""

    scenario: str
    metric: str
    unit: str
    sdk: float
    raw: float | None
    better: Better = "lower"
    target: str = ""
    """Human form of the target, e.g. ``<= 1.2x raw``."""
    check: Callable[[Row], bool] | None = None
    note: str = ""
    samples_sdk: list[float] = field(default_factory=list)
    samples_raw: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.raw is None or self.raw == 0:
            return None
        return self.sdk / self.raw

    @property
    def met(self) -> bool | None:
        return None if self.check is None else self.check(self)


def ratio_at_most(limit: float) -> Callable[[Row], bool]:
    return lambda row: row.ratio is not None and row.ratio <= limit


def ratio_at_least(limit: float) -> Callable[[Row], bool]:
    return lambda row: row.ratio is not None and row.ratio >= limit


def sdk_below(limit: float) -> Callable[[Row], bool]:
    return lambda row: row.sdk < limit


def warm_up() -> None:
    """Import what both sides use, so no repetition pays for imports."""
    import envoy.config.cluster.v3.cluster_pb2
    import envoy.service.discovery.v3.ads_pb2_grpc
    import envoy.service.discovery.v3.discovery_pb2  # noqa: F401

    import xds_client.client
    import xds_client.store  # noqa: F401


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def rss_bytes() -> int:
    """Resident set size of this process, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def machine() -> dict[str, str]:
    """CPU, cores, Python, grpcio and protobuf (with its backend)."""
    import grpc
    from google.protobuf import __version__ as pb_version
    from google.protobuf.internal import api_implementation

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load average (1 min)": f"{load:.1f}",
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "grpcio": grpc.__version__,
        "protobuf": f"{pb_version} ({api_implementation.Type()} backend)",
    }


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.1f} ms" if value < 100 else f"{value:.0f} ms"
    if unit == "µs":
        return f"{value:.0f} µs"
    if unit == "B":
        return f"{value:,.0f} B"
    if unit == "/s":
        return f"{value:,.0f}/s"
    return f"{value:.3g} {unit}"


def render(rows: Sequence[Row], info: dict[str, str], config: Config) -> str:
    """The results as a Markdown table, with the machine and run details."""
    lines = [
        "| scenario | metric | SDK | raw | SDK/raw | target | met |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for row in rows:
        ratio = row.ratio
        met = row.met
        lines.append(
            f"| {row.scenario} | {row.metric} | {_fmt(row.sdk, row.unit)} | "
            f"{_fmt(row.raw, row.unit)} | {'-' if ratio is None else f'{ratio:.2f}x'} | "
            f"{row.target or '-'} | {'-' if met is None else ('yes' if met else '**no**')} |"
        )
    details = ", ".join(f"{k}: {v}" for k, v in info.items())
    reps = (
        f"Medians of {config.reps} repetitions (memory and reconnect: "
        f"{max(1, min(config.reps, 3))} fresh processes per client; imports: "
        f"{config.import_reps} interpreters each)"
        if config.reps > 1
        else "1 repetition"
    )
    lines += ["", f"Machine: {details}.", "", f"{reps}."]
    notes = [f"- {row.scenario}, {row.metric}: {row.note}" for row in rows if row.note]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"
