"""``amends view``: show the live materialized view, optionally refreshing; or rebuild it."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack, closing

from amends_core.ledger import Config, Projection, Status, StockKey
from amends_core.timefmt import format_day
from amends_core.view import ViewState, reason_counts
from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.errors import UsageError
from amends_pipeline.inputs import load_config
from amends_pipeline.kafka.topics import KafkaError, Reader, Watermarks
from amends_pipeline.manifest import ManifestMissing, read_manifest
from amends_pipeline.ops.orchestration import ViewHealth
from amends_pipeline.postgres.errors import NamespaceUnknown
from amends_pipeline.postgres.view_store import PgViewStore
from amends_pipeline.redaction import redact
from amends_pipeline.roles.loop import Stop, run_loop
from amends_pipeline.roles.steps import open_steps
from amends_pipeline.roles.view import rebuild_view
from amends_pipeline.runtime import Runtime
from amends_pipeline.text import key_text, printable, terminal_safe


def register(sub: Subparsers) -> None:
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
            " starts at offset 0. Each output partition is marked ok, lagging N (its frontier"
            " behind the output topic's end), stopped (a protocol diagnostic, or OutputLost:"
            " the output log no longer starts at or below its frontier) or lag unknown (Kafka"
            " could not be read); keys of a partition that is not ok never print as plain"
            " READY. Without --rebuild nothing is written: a namespace that was never"
            " provisioned is an error. Exit 0 (also when partitions are stale, unless"
            " --certified), 1 when --certified and a shown key's partition is not current,"
            " or when the rebuild is refused or fails, 2 on unusable arguments or environment"
            " or a namespace that was never provisioned."
        ),
    )
    add_config(p)
    p.add_argument("--key", action="append", metavar="ITEM/LOCATION", help="only these keys")
    p.add_argument("--last", type=int, default=10, help="show the last N days per key (0 = all)")
    p.add_argument("--watch", nargs="?", const=2.0, type=float, metavar="SECONDS")
    p.add_argument(
        "--certified", action="store_true",
        help="exit 1 unless every shown key's output partition is current (not stopped, not"
        " lagging, its lag known); says why and what to run",
    )
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


def partition_health(
    cfg: Config,
    snap: ViewState,
    ends: dict[int, Watermarks],
    unknown: str | None,
) -> dict[int, ViewHealth]:
    """Each output partition's health: stop diagnostic from the store, lag from the output log."""
    out = {}
    for p in range(cfg.partitions):
        wm = ends.get(p)
        out[p] = ViewHealth(
            p, snap.frontier(p), snap.stopped.get(p),
            None if wm is None else wm.low, None if wm is None else wm.high,
            None if wm is not None else unknown or "the output end was not read",
        )
    return out


def recovery(h: ViewHealth, config: str) -> str:
    """What to run for a partition that is not current."""
    if h.stopped is not None:
        return (
            "find what produced the offending record on the output topic, then"
            f" `amends view --rebuild --config {config} --partition {h.partition}`"
            " (see docs/operations.md)"
        )
    if h.lost:
        return f"`amends view --rebuild --config {config} --partition {h.partition}`, then `amends verify`"
    if h.lag is None:
        return "check that Kafka is reachable (AMENDS_KAFKA_BOOTSTRAP) and run again"
    return f"run (or restart) `amends role view --config {config}` until it catches up"


def render(
    projections: dict[StockKey, Projection],
    frontiers: dict[int, int],
    stopped: dict[int, str],
    keys: list[str] | None,
    last: int,
    health: dict[int, ViewHealth] | None = None,
    partition_of: dict[StockKey, int] | None = None,
    counts: dict[StockKey, int] | None = None,
) -> str:
    """The view as text; with ``health``, partitions and keys that are not current are marked.

    ``counts``: current conflict references per key (a BLOCKED key shows at most the
    first few; the rest are counted). Every piece of data is escaped for a terminal.
    """
    out = []
    fr = ", ".join(f"p{p}={f}" for p, f in sorted(frontiers.items())) or "nothing applied"
    out.append(f"view frontiers: {fr}")
    if health is None:
        for p, why in sorted(stopped.items()):
            out.append(f"  PARTITION {p} STOPPED: {why}")
    else:
        for p, ph in sorted(health.items()):
            if not ph.current:
                out.append(f"  PARTITION {p} {ph.state()} (frontier {ph.frontier})")
    for k, proj in sorted(projections.items()):
        name = f"{k.item}/{k.location}"
        if keys and name not in keys:
            continue
        head = f"{key_text(k)}: {proj.status.value}"
        h = None
        if health is not None and partition_of is not None and k in partition_of:
            h = health.get(partition_of[k])
        if h is not None and not h.current:
            head += f" (stale: partition {h.partition} {h.short()}, frontier {h.frontier})"
        if proj.status is Status.BLOCKED:
            refs = ", ".join(f"{printable(r.txn_id)}@r{r.revision}" for r in proj.reasons)
            more = (counts or {}).get(k, len(proj.reasons)) - len(proj.reasons)
            if more > 0:
                refs += f" and {more} more"
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
    return terminal_safe("\n".join(out))


class OutputEnds:
    """The output topic's watermarks, read afresh on every call; failures become a reason."""

    def __init__(self, rt: Runtime, vs: PgViewStore) -> None:
        self.rt = rt
        self.vs = vs
        self.reader: Reader | None = None

    def read(self) -> tuple[dict[int, Watermarks], str | None]:
        try:
            if self.reader is None:
                m = read_manifest(self.vs.db, self.vs.ns_id, self.rt.cfg)
                self.reader = self.rt.reader(m.output_topic)
            ends = {}
            for p in range(self.rt.cfg.partitions):
                ends[p] = self.reader.watermarks(p)
        except ManifestMissing:
            return {}, "no output topic is bound to the namespace (run `amends provision`)"
        except (KafkaError, UsageError) as e:
            self.close()
            return {}, f"the output topic could not be read: {redact(e)}"
        return ends, None

    def close(self) -> None:
        r, self.reader = self.reader, None
        if r is not None:
            r.close()


@operational
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    if not args.rebuild and (args.partition or args.discard_rows):
        msg = "--partition and --discard-rows belong to --rebuild"
        raise UsageError(msg)
    if args.rebuild:
        if args.certified:
            msg = "--certified does not go with --rebuild"
            raise UsageError(msg)
        return rebuild(Runtime(cfg), args)
    rt = Runtime(cfg, read_only=True)
    stop = Stop()
    if args.watch:
        stop.install()
    try:
        vs = rt.view_store()
    except NamespaceUnknown as e:
        raise UsageError(e.message(args.config)) from None
    partition_of = {kc.key: kc.partition for kc in cfg.keys}
    with vs, closing(OutputEnds(rt, vs)) as output:
        while True:
            snap = vs.snapshot()
            ends, unknown = output.read()
            health = partition_health(cfg, snap, ends, unknown)
            projections = snap.projections()
            text = render(
                projections, dict(snap.frontiers), dict(snap.stopped), args.key, args.last,
                health, partition_of, reason_counts(snap.rows.values()),
            )
            if args.watch:
                sys.stdout.write("\x1b[H\x1b[2J" + time.strftime("%H:%M:%S ") + text + "\n")
                sys.stdout.flush()
                stop.wait(args.watch)
                if stop.requested:
                    return 0
            else:
                print(text)
                print("\n".join(_snapshot_lines(rt)))
                return certify(args, health, partition_of, projections) if args.certified else 0


def certify(
    args: argparse.Namespace,
    health: dict[int, ViewHealth],
    partition_of: dict[StockKey, int],
    projections: dict[StockKey, Projection],
) -> int:
    """--certified: 1 (and why, what to run) when a shown key's partition is not current."""
    shown = [
        k for k in projections
        if not args.key or f"{k.item}/{k.location}" in args.key
    ]
    parts = sorted({partition_of[k] for k in shown if k in partition_of})
    bad = [health[p] for p in parts if not health[p].current]
    for h in bad:
        print(
            terminal_safe(
                redact(
                    f"amends view: not certified: output partition {h.partition} {h.state()}"
                    f" (frontier {h.frontier}); {recovery(h, args.config)}"
                )
            ),
            file=sys.stderr,
        )
    return 1 if bad else 0


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
        print(terminal_safe(line))
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


def _snapshot_lines(rt: Runtime) -> list[str]:
    """The source snapshot's lines, or one saying why they are missing (the view still shows)."""
    from amends_pipeline.ops.snapshot import status_lines

    try:
        return [terminal_safe(line) for line in status_lines(rt)]
    except (KafkaError, ManifestMissing) as e:
        return [f"source snapshot: lag unknown ({redact(e)})"]
