"""``amends view``: show the live materialized view, optionally refreshing."""

from __future__ import annotations

import argparse
import sys
import time

from amends_core.ledger import Projection, Status, StockKey
from amends_core.timefmt import format_day
from amends_pipeline.commands._common import load_config, operational
from amends_pipeline.roles.loop import Stop
from amends_pipeline.runtime import Runtime


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "view",
        help="show the live view: per key status, balances and alerts",
        description=(
            "Reads the materialized view from PostgreSQL in one consistent snapshot and prints"
            " every key's status, daily closes and alerts (BLOCKED keys show their frozen"
            " values marked as not certified). --watch refreshes until interrupted."
        ),
    )
    p.add_argument("--config", required=True, metavar="CONFIG.json")
    p.add_argument("--key", action="append", metavar="ITEM/LOCATION", help="only these keys")
    p.add_argument("--last", type=int, default=10, help="show the last N days per key (0 = all)")
    p.add_argument("--watch", nargs="?", const=2.0, type=float, metavar="SECONDS")
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
    rt = Runtime(load_config(args.config))
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
