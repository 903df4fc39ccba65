"""``amends view``: show the live materialized view, optionally refreshing; or rebuild it."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack

from amends_core.ledger import Projection, Status, StockKey
from amends_core.timefmt import format_day
from amends_pipeline.commands._common import load_config, operational
from amends_pipeline.errors import UsageError
from amends_pipeline.roles.loop import Stop, run_loop
from amends_pipeline.roles.steps import open_steps
from amends_pipeline.roles.view import rebuild_view
from amends_pipeline.runtime import Runtime


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "view",
        help="show the live view: per key status, balances and alerts",
        description=(
            "Reads the materialized view from PostgreSQL in one consistent snapshot and prints"
            " every key's status, daily closes and alerts (BLOCKED keys show their frozen"
            " values marked as not certified). --watch refreshes until interrupted."
            " --rebuild moves the view's frontier of each chosen output partition back to the"
            " start of the retained (compacted) output log, clears a stop diagnostic and"
            " re-applies the log until caught up; rows are kept (the version rule only moves"
            " them forward) unless --discard-rows, which is refused when the log no longer"
            " starts at offset 0. Exit 0, 1 when the rebuild is refused or fails, 2 on"
            " unusable arguments or environment."
        ),
    )
    p.add_argument("--config", required=True, metavar="CONFIG.json")
    p.add_argument("--key", action="append", metavar="ITEM/LOCATION", help="only these keys")
    p.add_argument("--last", type=int, default=10, help="show the last N days per key (0 = all)")
    p.add_argument("--watch", nargs="?", const=2.0, type=float, metavar="SECONDS")
    p.add_argument(
        "--rebuild", action="store_true",
        help="re-apply the output log from its start (after OutputLost, or to rebuild the view)",
    )
    p.add_argument(
        "--partition", type=int, action="append", metavar="P",
        help="with --rebuild: output partitions to rebuild (repeatable); default: all",
    )
    p.add_argument(
        "--discard-rows", action="store_true",
        help="with --rebuild: delete the partitions' rows first and rebuild them from the log alone",
    )
    p.add_argument("--batch-size", type=int, default=5000, help="with --rebuild: records per batch")
    p.set_defaults(func=run)


def render(
    projections: dict[StockKey, Projection],
    frontiers: dict[int, int],
    stopped: dict[int, str],
    keys: list[str] | None,
    last: int,
) -> str:
    out = []
    fr = ", ".join(f"p{p}={f}" for p, f in sorted(frontiers.items())) or "nothing applied"
    out.append(f"view frontiers: {fr}")
    for p, why in sorted(stopped.items()):
        out.append(f"  PARTITION {p} STOPPED: {why}")
    for k, proj in sorted(projections.items()):
        name = f"{k.item}/{k.location}"
        if keys and name not in keys:
            continue
        head = f"{name}: {proj.status.value}"
        if proj.status is Status.BLOCKED:
            refs = ", ".join(f"{r.txn_id}@r{r.revision}" for r in proj.reasons)
            head += f" by {refs} (values frozen, not certified)"
        out.append(head)
        rows = proj.balances[-last:] if last else proj.balances
        if len(rows) < len(proj.balances):
            out.append(f"  ... {len(proj.balances) - len(rows)} earlier days")
        alerts = {a.day: a for a in proj.alerts}
        for b in rows:
            mark = f"  ALERT below {alerts[b.day].threshold}" if b.day in alerts else ""
            out.append(f"  {format_day(b.day)}  {b.close:>20,}{mark}")
        if not proj.balances:
            out.append("  no activity")
    return "\n".join(out)


@operational
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    if not args.rebuild and (args.partition or args.discard_rows):
        msg = "--partition and --discard-rows belong to --rebuild"
        raise UsageError(msg)
    if args.rebuild:
        return rebuild(Runtime(cfg), args)
    rt = Runtime(cfg)
    stop = Stop()
    if args.watch:
        stop.install()
    with rt.view_store() as vs:
        while True:
            snap = vs.snapshot()
            text = render(snap.projections(), dict(snap.frontiers), dict(snap.stopped), args.key, args.last)
            if args.watch:
                sys.stdout.write("\x1b[H\x1b[2J" + time.strftime("%H:%M:%S ") + text + "\n")
                sys.stdout.flush()
                stop.wait(args.watch)
                if stop.requested:
                    return 0
            else:
                print(text)
                return 0


def rebuild(rt: Runtime, args: argparse.Namespace) -> int:
    """Reset the chosen partitions to the start of their retained output log, then re-apply."""
    cfg = rt.cfg
    parts = sorted(set(args.partition or range(cfg.partitions)))
    bad = [p for p in parts if not 0 <= p < cfg.partitions]
    if bad:
        msg = f"partition {bad[0]} is not configured (0..{cfg.partitions - 1})"
        raise UsageError(msg)
    if args.batch_size < 1 or args.watch:
        msg = "--rebuild takes a --batch-size of at least 1 and no --watch"
        raise UsageError(msg)
    with rt.store("amends-view-manifest") as store:
        m = rt.manifest(store)
    with rt.view_store() as vs, rt.reader(m.output_topic) as reader:
        done = rebuild_view(vs, reader, parts, discard_rows=args.discard_rows)
    for r in done:
        x = r.reset
        line = f"output partition {x.partition}: frontier {x.frontier_before} -> {r.log_start} (log start)"
        if x.stopped_before is not None:
            line += f"; cleared stop: {x.stopped_before}"
        if args.discard_rows:
            line += f"; discarded {x.rows_discarded} rows"
        print(line)
        if r.log_start > 0:
            print(
                f"  warning: the output log of partition {x.partition} starts at offset {r.log_start},"
                " not 0: outputs whose latest envelope lay before it and that this view never"
                " applied cannot come back from the log; run `amends verify` and, on DRIFT,"
                " `amends rebuild` into a new namespace from the source"
            )
    with ExitStack() as stack:
        steps = open_steps(rt, "view", parts, args.batch_size, stack)
        applied = run_loop(steps, Stop(), until_idle=True)
    with rt.view_store() as vs:
        fr = ", ".join(f"p{p}={vs.frontier(p)}" for p in parts)
    print(f"re-applied {applied} output records; view frontiers {fr}")
    return 0
