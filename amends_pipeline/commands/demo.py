"""``amends demo``: the worked example end to end through Dagster (or, with --in-memory, the memory model)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from amends_core import demo, oracle
from amends_core.timefmt import format_day
from amends_pipeline import showcase
from amends_pipeline.commands._common import FIXTURES, Subparsers, operational
from amends_pipeline.inputs import load_config, read_bytes


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "demo",
        help="run the worked example (initial history, amendment, cancellation) end to end",
        description=(
            "The main job. Runs the three stages of the worked example through the Dagster"
            " definitions in process (refold_job, the relay sensor, boundary_job with the"
            " blocking verification check and certified_balances) on real components: the"
            " local PostgreSQL server (AMENDS_PG_DSN; a schema of its own, dropped afterwards)"
            " and a Kafka broker started for the run (the real Apache Kafka broker when Java and"
            " its jars are available, else the development broker). Prints each stage's view,"
            " what it restated and withdrew, and the verification status. Exit 0 only when every"
            " stage verifies PASS and matches the hand-written expectations. --in-memory runs"
            " the same stages on the memory model instead (no PostgreSQL, Kafka or Dagster)."
        ),
    )
    p.add_argument("--fixture", default=str(FIXTURES / "worked-example"), metavar="DIR",
                   help="fixture folder (--in-memory only; the main job uses the worked example)")
    p.add_argument("--in-memory", action="store_true", help="the memory model instead of the real pipeline")
    p.add_argument("--broker", choices=["auto", "real", "dev"], default="auto",
                   help="which Kafka broker the main job starts (default: real when available)")
    p.add_argument("--json", action="store_true", help="print machine-readable results")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def _oracle_fn() -> demo.OracleFn:
    return lambda cfg, recs: oracle.compute(cfg, recs).result


def _print_stage(i: int, r: demo.StageResult) -> None:
    print(f"\n== stage {i}: {r.name}")
    print("   committed envelopes:")
    for e in r.envelopes:
        day = "-" if e.output_id.day is None else format_day(e.output_id.day)
        p = e.payload
        if p.status is not None:
            what = p.status.value
        elif not p.present:
            what = "withdrawn"
        elif p.threshold is not None:
            what = f"close {p.close} below threshold {p.threshold}"
        else:
            what = f"close {p.close}"
        print(
            f"     {e.type.value:<17} {day:<10} v{e.version:<3} {what:<32}"
            f" cause {e.cause.txn_id} r{e.cause.revision} @offset {e.cause.offset}"
        )
    print(f"   frontiers: source {r.source_frontier}, output/view {r.output_frontier}")
    for k in r.view["keys"]:
        bal = ", ".join(f"{b['day']}={b['close']}" for b in k["balances"]) or "none"
        al = ", ".join(f"{a['day']} ({a['close']}<{a['threshold']})" for a in k["alerts"]) or "none"
        print(f"   view {k['item']}@{k['location']}: {k['status']}; closes {bal}; alerts {al}")
    print(f"   hand-written expectation: {'AGREES' if r.matches_expected else 'DISAGREES'}")
    if r.oracle_agrees is None:
        print("   oracle: not available")
    else:
        print(f"   oracle: {'AGREES' if r.oracle_agrees else 'DISAGREES'}")


@operational
def run(args: argparse.Namespace) -> int:
    if args.in_memory:
        return run_memory(args)
    return run_dagster(args)


def _progress(quiet: bool) -> Callable[[str], None]:
    t0 = time.monotonic()

    def say(text: str) -> None:
        if not quiet:
            print(f"[{time.monotonic() - t0:5.1f}s] {text}", file=sys.stderr, flush=True)

    return say


def run_dagster(args: argparse.Namespace) -> int:
    kind, outcomes = showcase.run(_progress(args.quiet), prefer_broker=args.broker)
    ok = len(outcomes) == 3 and all(o.ok for o in outcomes)
    if args.json:
        print(json.dumps(
            {"broker": kind, "ok": ok, "stages": [
                {"stage": o.name, "status": o.status, "accepted": o.accepted, "view": o.view,
                 "changes": o.changes, "matches_expected": o.matches_expected, "certified": o.certified,
                 "seconds": round(o.seconds, 3)}
                for o in outcomes
            ]},
            indent=2,
        ))
        return 0 if ok else 1
    print(f"amends demo: the worked example through Dagster, PostgreSQL and {kind}")
    for i, o in enumerate(outcomes, 1):
        print(f"\n== stage {i}: {o.name}  ({o.seconds:.1f}s)")
        for k in o.view:
            bal = ", ".join(f"{b['day']}={b['close']}" for b in k["balances"]) or "none"
            al = ", ".join(f"{a['day']} ({a['close']}<{a['threshold']})" for a in k["alerts"]) or "none"
            print(f"   view {k['item']}@{k['location']}: {k['status']}; closes {bal}; alerts {al}")
        for c in o.changes or ["nothing changed"]:
            print(f"   {c}")
        print(f"   verification: {o.status}{'' if o.accepted else ' (not accepted)'}")
        print(f"   hand-written expectation: {'AGREES' if o.matches_expected else 'DISAGREES'};"
              f" certified_balances: {'written' if o.certified else 'NOT written or wrong'}")
        if not o.ok and o.report:
            print("   " + o.report.replace("\n", "\n   "))
    verdict = "PASS" if ok else "FAILED"
    what = "every stage verified PASS and matched" if ok else "some stage did not verify or match"
    print(f"\n{verdict}: {what} its hand-written expectation")
    return 0 if ok else 1


def run_memory(args: argparse.Namespace) -> int:
    root = Path(args.fixture)
    cfg = load_config(root / "config.json")
    stages = demo.load_stages(
        read_bytes(root / "stages.json", "stage manifest"),
        lambda name: read_bytes(root / name, "fixture file"),
    )
    oracle = _oracle_fn()
    results = demo.run(cfg, stages, oracle)
    ok = all(r.matches_expected and r.oracle_agrees for r in results)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "stage": r.name,
                        "envelopes": r.envelope_summary,
                        "source_frontier": r.source_frontier,
                        "output_frontier": r.output_frontier,
                        "view": r.view,
                        "matches_expected": r.matches_expected,
                        "oracle_agrees": r.oracle_agrees,
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    else:
        print(f"amends demo: namespace {cfg.namespace}, configuration {cfg.digest()[:12]}")
        for i, r in enumerate(results, 1):
            _print_stage(i, r)
        verdict = "CORE_AGREEMENT" if ok else "DISAGREEMENT"
        print(f"\n{verdict}: fixture expectations, memory view and oracle "
              f"{'agree' if ok else 'do not agree'} at every stage")
    return 0 if ok else 1
