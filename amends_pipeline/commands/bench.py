"""``amends bench``: run the benchmark suites and write docs/benchmarks.md.

The options are declared here; the suites live in the ``benchmarks`` package of
a checkout, which is imported only when the command runs, so no other command
(and nothing a production process runs) loads benchmark code.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from amends_pipeline.commands._common import Subparsers

SUITE_NAMES = (
    "core", "durable", "worker-memory", "oracle", "snapshot", "compute", "simulator", "end-to-end", "dagster",
)
"""The suites of a default run, in order (``benchmarks.run.SUITES`` has exactly these)."""
OPT_IN_NAMES = ("verify-memory", "snapshot-scale")
"""Suites that run only when named with --only (``benchmarks.run.OPT_IN``)."""
DEFAULT_OUT = Path("docs") / "benchmarks.md"


def add_arguments(p: argparse.ArgumentParser, out: Path = DEFAULT_OUT) -> None:
    p.add_argument("--tiny", action="store_true", help="tiny sizes (seconds); numbers are meaningless")
    p.add_argument("--runs", type=int, default=5, help="runs per core figure (median, min, max)")
    p.add_argument("--runs-slow", type=int, default=3, help="runs per figure of the slower suites")
    p.add_argument("--oracle-records", type=int, nargs="+", default=[1_000_000, 10_000_000], metavar="N")
    p.add_argument(
        "--only", action="append", choices=sorted(SUITE_NAMES + OPT_IN_NAMES),
        help="run only these suites (repeatable); their groups replace the same groups of an existing"
        " report at --out, every other figure there is kept",
    )
    p.add_argument("--core-days", type=int, nargs="+", default=[1_000, 10_000, 100_000], metavar="N")
    p.add_argument("--verify-records", type=int, default=5_000_000, metavar="N",
                   help="verify-memory (opt-in, --only): source records to verify")
    p.add_argument("--baseline-checkout", type=Path, default=None, metavar="PATH",
                   help="verify-memory, simulator, durable, oracle, end-to-end: also measure this checkout"
                   " (e.g. 9aee8a1 for verify-memory, e4906cd for the simulator before it ran the production"
                   " roles, f6860fe for end-to-end before the roles waited for work)")
    p.add_argument("--baseline-ref", default=None, metavar="REF",
                   help="like --baseline-checkout, on a checkout of this repository's commit REF that the"
                   " run makes (once) under var/bench-baseline/; `make bench` passes the commit before"
                   " issue 16's throughput work")
    p.add_argument("--out", default=str(out), help="markdown report path")


def _execute(a: argparse.Namespace) -> int:
    from benchmarks import run as bench_run  # a checkout's benchmarks, only for this command

    if a.out == str(DEFAULT_OUT):  # the default report is the checkout's, wherever this runs
        a.out = str(bench_run.ROOT / DEFAULT_OUT)
    return bench_run.execute(a)


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "bench",
        help="run the benchmarks and write docs/benchmarks.md (+ .json)",
        description="Run every benchmark and write docs/benchmarks.md and docs/benchmarks.json"
        " (`--tiny`: seconds, what CI runs to keep the code honest).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=_execute)
