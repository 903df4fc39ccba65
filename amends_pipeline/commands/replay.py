"""``amends replay``: check an already-consumed source interval (dry run by default)."""

from __future__ import annotations

import argparse

from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.inputs import load_config
from amends_pipeline.ops.replay import replay
from amends_pipeline.runtime import Runtime


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "replay",
        help="check an already-consumed source interval against intact state",
        description=(
            "Reads [--from, --until) of one source partition and checks that every record is"
            " already reflected exactly (same evidence at the same coordinates and no new"
            " envelope, or the same quarantine record and reason). Dry run by default; with"
            " --execute a new ownership epoch is claimed after the whole interval passed"
            " (a running worker of that partition is fenced out). Frontier, evidence and"
            " output versions never change. Exit 0 when the interval matches, 1 otherwise."
        ),
    )
    add_config(p)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--from", dest="start", type=int, required=True, metavar="OFFSET")
    p.add_argument("--until", type=int, required=True, metavar="OFFSET", help="exclusive")
    p.add_argument("--execute", action="store_true")
    p.set_defaults(func=run_replay)


@operational
def run_replay(args: argparse.Namespace) -> int:
    rt = Runtime(load_config(args.config))
    plan = replay(rt, args.partition, args.start, args.until, execute=args.execute)
    what = f"partition {plan.partition} [{plan.start}, {plan.until}): {plan.records} records match"
    if plan.executed:
        print(f"{what}; claimed epoch {plan.epoch}; frontier and versions unchanged")
    else:
        print(f"{what} (dry run; --execute claims a new epoch)")
    return 0
