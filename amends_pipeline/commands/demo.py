"""``amends demo``: the worked example through worker, relay and view in memory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from amends_core import demo, oracle
from amends_core.timefmt import format_day
from amends_pipeline.commands._common import FIXTURES, load_config, read_bytes


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="run the worked example (initial history, amendment, cancellation)",
        description=(
            "Runs the three fixture stages through worker -> outbox -> relay -> view on the"
            " memory model and compares every stage with its hand-written expectation and"
            " with the independent oracle. Exit 0 only when everything agrees."
        ),
    )
    p.add_argument("--fixture", default=str(FIXTURES / "worked-example"), metavar="DIR")
    p.add_argument("--json", action="store_true", help="print machine-readable results")
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


def run(args: argparse.Namespace) -> int:
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
