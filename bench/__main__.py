"""``python -m bench``: run every scenario, print the table, write docs/performance.md."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import delta, imports, memory, sotw, store, validation
from bench._harness import Config, Row, machine, render, warm_up
from bench._server import ServerProcess

SCENARIOS = {
    "sotw": sotw.run,
    "delta": delta.run,
    "memory": memory.run,
    "store": store.run,
    "imports": imports.run,
    "validation": validation.run,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 repetition, no docs")
    parser.add_argument("--only", action="append", choices=sorted(SCENARIOS), help="scenarios")
    parser.add_argument("--reps", type=int, help="repetitions (medians are reported)")
    parser.add_argument("--no-write", action="store_true", help="do not write docs/performance.md")
    args = parser.parse_args(argv)
    cfg = Config.smoke_config() if args.smoke else Config()
    if args.reps:
        cfg = Config(**{**cfg.__dict__, "reps": args.reps})
    rows: list[Row] = []
    started = time.perf_counter()
    info = machine()  # the load average before the run
    warm_up()
    with ServerProcess() as server:
        for name in args.only or list(SCENARIOS):
            t0 = time.perf_counter()
            rows += SCENARIOS[name](server, cfg)
            print(f"# {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    info["load average (1 min)"] += f" before, {machine()['load average (1 min)']} after"
    table = render(rows, info, cfg)
    print(table)
    print(f"# total {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if not (args.smoke or args.no_write or args.only):
        write_docs(table)
    return 0


def write_docs(table: str) -> None:
    path = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
    text = path.read_text() if path.exists() else ""
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    block = f"{begin}\n{table}{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = f"# Performance\n\n{block}\n" + text
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
