"""``amends bench``: run the benchmark suites and write docs/benchmarks.md."""

from __future__ import annotations

import argparse

from benchmarks import run as bench_run


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="run the benchmarks and write docs/benchmarks.md (+ .json)",
        description=bench_run.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench_run.add_arguments(p)
    p.set_defaults(func=bench_run.execute)
