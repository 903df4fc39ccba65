"""``amends prune``: delete published outbox rows and old quarantine payloads (retention)."""

from __future__ import annotations

import argparse

from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.inputs import load_config
from amends_pipeline.manifest import check_source
from amends_pipeline.postgres.prune import prune
from amends_pipeline.runtime import Runtime

DEFAULT_KEEP_DAYS = 7.0
MAX_KEEP_DAYS = 36500.0


def _keep_days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not 0 <= days <= MAX_KEEP_DAYS:  # also refuses nan and inf
        msg = f"--keep-days {text!r}: expected a number of days from 0 to {MAX_KEEP_DAYS:.0f}"
        raise argparse.ArgumentTypeError(msg)
    return days


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "prune",
        help="delete published outbox rows and old quarantine payloads past the retention",
        description=(
            "Deletes outbox rows that the relay published and the view applied and that were"
            " committed more than --keep-days ago, and replaces the raw bytes of quarantine"
            " records older than that by their SHA-256 and length, but only for records the"
            " source topic no longer holds (the record itself, its coordinates and reason stay)."
            " Pending or unapplied rows are never touched. --dry-run counts and changes nothing."
            " Exit 0, 1 on a store or Kafka failure, 2 on unusable arguments or environment."
        ),
    )
    add_config(p)
    p.add_argument(
        "--keep-days", type=_keep_days, default=DEFAULT_KEEP_DAYS, metavar="N",
        help=f"retention in days, fractions allowed (default {DEFAULT_KEEP_DAYS:g})",
    )
    p.add_argument("--dry-run", action="store_true", help="count what would be pruned; change nothing")
    p.set_defaults(func=run)


@operational
def run(args: argparse.Namespace) -> int:
    rt = Runtime(load_config(args.config)).reading()
    with rt.store("amends-prune") as store:
        m = rt.manifest(store)
        with rt.reader(m.source_topic) as reader:
            marks = check_source(reader, m)  # the topic is still the bound incarnation
        low = {p: wm.low for p, wm in marks.items()}
        res = prune(
            store.db, store.ns_id, range(rt.cfg.partitions), args.keep_days * 86400.0, low,
            dry_run=args.dry_run,
        )
    verb = "would delete" if res.dry_run else "deleted"
    qverb = "would drop" if res.dry_run else "dropped"
    print(
        f"namespace {rt.cfg.namespace!r}: {verb} {res.total_outbox} published outbox rows and"
        f" {qverb} {res.total_quarantine} quarantine payloads older than {args.keep_days:g} days"
        + (" (dry run: nothing changed)" if res.dry_run else "")
    )
    for p in sorted(res.outbox_rows):
        print(f"  partition {p}: outbox {res.outbox_rows[p]}, quarantine {res.quarantine_payloads.get(p, 0)}")
    return 0
