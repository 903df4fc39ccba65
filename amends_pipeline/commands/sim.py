"""``amends sim``: seeded fault-schedule soaks, exact trace replay and trace shrinking.

All simulation logic lives in ``amends_core.sim``; this module only reads and
writes trace files, runs seeds in worker processes, and prints.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

from amends_core.sim import trace as trace_mod
from amends_core.sim.generate import generate
from amends_core.sim.run import RunResult, SoakSummary, run_trace, shrink_trace, soak_chunk
from amends_pipeline.commands._common import Subparsers
from amends_pipeline.errors import UsageError
from amends_pipeline.inputs import read_bytes

TOOLCHAIN = f"CPython {platform.python_version()} ({platform.machine() or 'unknown'})"
CHUNK = 25
"""Seeds per unit of work handed to a worker process."""


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "sim",
        help="simulate fault schedules, replay or shrink a trace",
        description=(
            "Deterministic simulation of worker, relay, view and ownership faults."
            " --seed N --runs K checks seeds N..N+K-1 (safety after every step,"
            " verification at a complete boundary) and writes a shrunk trace for every"
            " failure it keeps. --replay TRACE reruns a saved trace exactly; --shrink TRACE"
            " reduces a failing trace to a minimal one that replays to the same failure."
            " Exit 0 when every run passes (or the shrunk trace was written), 1 on any safety"
            " violation, liveness failure or unexpected verification status, 2 on unusable"
            " arguments or traces (including a trace that does not fail, for --shrink)."
        ),
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--seed", type=int, metavar="N", help="first seed of a soak")
    mode.add_argument("--replay", metavar="TRACE", help="rerun a saved trace exactly")
    mode.add_argument("--shrink", metavar="TRACE", help="reduce a failing trace")
    p.add_argument("--runs", type=int, default=100, metavar="K", help="seeds to check (default 100)")
    p.add_argument("--jobs", type=int, default=1, metavar="J", help="worker processes (default 1)")
    p.add_argument("--max-records", type=int, default=8, metavar="R", help="source records per seed")
    p.add_argument("--max-steps", type=int, default=80, metavar="S", help="explicit steps per seed")
    p.add_argument(
        "--ahead", type=int, default=1, metavar="A",
        help="soak: batches a worker step may run, each folded while the one before commits"
        " (the worker role runs 4; default 1). A trace records it, so --replay and --shrink"
        " need no option",
    )
    p.add_argument(
        "--out", metavar="PATH",
        help="soak: directory for failing traces (default sim-failures);"
        " shrink: output file (default TRACE with .min.json)",
    )
    p.add_argument("--keep", type=int, default=3, metavar="F", help="soak: failures to shrink and write")
    p.add_argument("--verbose", "-v", action="store_true", help="replay: print every event")
    p.add_argument("--no-progress", "--quiet", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.seed is not None:
        return _soak(args)
    if args.replay is not None:
        return _replay(args)
    return _shrink(args)


# ---------------------------------------------------------------- files


def _load(path: str) -> trace_mod.Trace:
    try:
        return trace_mod.loads(read_bytes(path, "trace"))
    except trace_mod.TraceError as e:
        msg = f"trace {path!r} refused: {e}"
        raise UsageError(msg) from None


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        msg = f"cannot write {str(path)!r}: {e.strerror or e}"
        raise UsageError(msg) from None


# ---------------------------------------------------------------- soak


def _chunks(first: int, runs: int) -> Iterator[tuple[int, int]]:
    for start in range(first, first + runs, CHUNK):
        yield start, min(CHUNK, first + runs - start)


class _Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm ships with dagster
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(
                    total=total, unit="sched", file=sys.stderr, dynamic_ncols=True, disable=None
                )

    def update(self, n: int, failures: int) -> None:
        if self.bar is not None:
            self.bar.update(n)
            self.bar.set_postfix(failures=failures, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _soak(args: argparse.Namespace) -> int:
    if args.runs < 1 or args.jobs < 1 or args.max_records < 1 or args.max_steps < 0:
        msg = "--runs, --jobs and --max-records must be positive, --max-steps not negative"
        raise UsageError(msg)
    if not 1 <= args.ahead <= trace_mod.MAX_AHEAD:
        msg = f"--ahead must be from 1 to {trace_mod.MAX_AHEAD}"
        raise UsageError(msg)
    if args.seed < 0:
        msg = "--seed must not be negative"
        raise UsageError(msg)
    total = SoakSummary()
    progress = _Progress(args.runs, not args.no_progress)
    t0 = time.perf_counter()
    try:
        if args.jobs == 1:
            for start, n in _chunks(args.seed, args.runs):
                part = soak_chunk(start, n, args.max_records, args.max_steps, ahead=args.ahead)
                total.merge(part)
                progress.update(part.runs, len(total.failures))
        else:
            ctx = get_context("spawn")
            with ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx) as pool:
                futures = [
                    pool.submit(soak_chunk, start, n, args.max_records, args.max_steps, ahead=args.ahead)
                    for start, n in _chunks(args.seed, args.runs)
                ]
                for f in as_completed(futures):
                    part = f.result()
                    total.merge(part)
                    progress.update(part.runs, len(total.failures))
    finally:
        progress.close()
    elapsed = time.perf_counter() - t0
    total.failures.sort()
    _print_summary(args, total, elapsed)
    if not total.failures:
        return 0
    out = Path(args.out or "sim-failures")
    for seed, text in total.failures[: args.keep]:
        print(f"\nseed {seed} failed: {text}")
        t = generate(
            seed, max_records=args.max_records, max_steps=args.max_steps, toolchain=TOOLCHAIN,
            ahead=args.ahead,
        )
        first = run_trace(t).failure
        full = t.with_parts(failure=None if first is None else first.signature)
        _write(out / f"seed-{seed}.trace.json", trace_mod.dumps(full))
        small, failure = shrink_trace(t)
        path = out / f"seed-{seed}.min.trace.json"
        _write(path, trace_mod.dumps(small))
        print(
            f"  shrunk to {len(small.records)} records and {len(small.steps)} steps: {failure}"
        )
        print(f"  minimal trace: {path}  (amends sim --replay {path})")
    if len(total.failures) > args.keep:
        print(f"\n{len(total.failures) - args.keep} more failing seeds were not shrunk (--keep)")
    return 1


def _print_summary(args: argparse.Namespace, total: SoakSummary, elapsed: float) -> None:
    last = args.seed + args.runs - 1
    ahead = f", worker steps of up to {args.ahead} batches" if args.ahead != 1 else ""
    print(
        f"amends sim: seeds {args.seed}..{last}{ahead}, {total.runs} schedules, {total.steps} steps,"
        f" {elapsed:.1f}s ({total.runs / max(elapsed, 1e-9) * 60:.0f} schedules/min,"
        f" {args.jobs} process{'es' if args.jobs != 1 else ''})"
    )
    print(f"{'status':<22} {'runs':>8} {'share':>7}")
    for status, n in sorted(total.statuses.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{status:<22} {n:>8} {n / total.runs:>7.1%}")
    print(f"{'schedules with faults':<22} {total.faulted:>8} {total.faulted / total.runs:>7.1%}")
    print(f"{'failures':<22} {len(total.failures):>8}")


# ---------------------------------------------------------------- replay and shrink


def _describe(r: RunResult, verbose: bool) -> None:
    t = r.trace
    ahead = f" worker steps of up to {t.ahead} batches," if t.ahead != 1 else ""
    print(
        f"trace: implementation {t.implementation}, toolchain {t.toolchain!r}, seed {t.seed},{ahead}"
        f" {len(t.records)} records, {len(t.steps)} explicit steps,"
        f" {len(r.model.events)} steps with the recovery suffix"
    )
    if verbose:
        for ev in r.model.events:
            print(f"  {ev}")
    if r.report is not None:
        print(r.report.render())
        if r.expected is not None:
            print(f"expected status: {r.expected.value}")
    if r.failure is not None:
        print(f"FAILED: {r.failure}")
    else:
        print("passed: every step was safe and the verdict is the expected one")
    if t.failure is not None:
        got = None if r.failure is None else r.failure.signature
        same = "reproduces" if got == t.failure else "does NOT reproduce"
        print(f"recorded failure {t.failure[0]}/{t.failure[1]}: this run {same} it")


def _replay(args: argparse.Namespace) -> int:
    t = _load(args.replay)
    r = run_trace(t)
    _describe(r, args.verbose)
    return 0 if r.ok else 1


def _shrink(args: argparse.Namespace) -> int:
    t = _load(args.shrink)
    try:
        small, failure = shrink_trace(t)
    except ValueError as e:
        raise UsageError(str(e)) from None
    src = Path(args.shrink)
    out = Path(args.out) if args.out else src.with_name(src.name.removesuffix(".json") + ".min.json")
    _write(out, trace_mod.dumps(small))
    print(
        f"shrunk {len(t.records)} records / {len(t.steps)} steps to {len(small.records)} /"
        f" {len(small.steps)}: {failure}"
    )
    print(f"minimal trace: {out}")
    return 0
