"""``amends snapshot``: append the source topic's new records to the snapshot table, exactly once."""

from __future__ import annotations

import argparse
import sys

from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.errors import UsageError
from amends_pipeline.inputs import load_config
from amends_pipeline.runtime import Runtime


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "snapshot",
        help="copy the source topic's new records into the snapshot table (Delta Lake)",
        description=(
            "Appends every source record past the snapshot table's captured end of each"
            " partition, up to the topic's current end, as raw bytes (key, value, headers,"
            " timestamp) in a Delta Lake table at AMENDS_SNAPSHOT_URI (default var/snapshot/)."
            " Each offset is written once, also when two appenders run at the same time or one"
            " is killed part way. Offsets without a message are kept as gaps that say why;"
            " records retention deleted before any capture are a named gap. Prints the range"
            " appended per partition and the table version. Exit 0; 1 on an operation error"
            " (such as a table holding another topic); 2 on unusable arguments or environment"
            " (an unreachable or malformed AMENDS_SNAPSHOT_URI among them)."
        ),
    )
    add_config(p)
    p.add_argument("--partition", type=int, action="append", metavar="P", help="only these partitions")
    p.add_argument(
        "--chunk", type=int, default=None, metavar="N",
        help="records per Delta commit (default 100,000): bounds the appender's memory",
    )
    p.add_argument(
        "--compact", action="store_true",
        help="instead of appending: rewrite the table's small files into large ones (same rows,"
        " a new table version)",
    )
    p.add_argument(
        "--vacuum", type=int, metavar="HOURS",
        help="instead of appending: delete data files that no table version of the last HOURS"
        " refers to (files replaced by --compact, or left by a killed appender); rows of the"
        " current version are never deleted, but versions older than HOURS can no longer be read",
    )
    p.set_defaults(func=run)


@operational
def run(args: argparse.Namespace) -> int:
    from amends_pipeline.ops.snapshot import take
    from amends_pipeline.snapshot.table import SnapshotError, WrongTopic

    if args.chunk is not None and args.chunk < 1:
        msg = f"--chunk must be at least 1, not {args.chunk}"
        raise UsageError(msg)
    if args.vacuum is not None and args.vacuum < 0:
        msg = f"--vacuum must be at least 0 hours, not {args.vacuum}"
        raise UsageError(msg)
    rt = Runtime(load_config(args.config), read_only=True)
    if args.compact or args.vacuum is not None:
        return _maintain(rt, args)
    try:
        taken = take(rt, args.partition, chunk=args.chunk)
    except WrongTopic as e:
        print(f"amends snapshot: {e}", file=sys.stderr)
        return 1
    except SnapshotError as e:
        raise UsageError(str(e)) from None
    for a in taken.appended:
        what = "nothing new" if a.end == a.start else f"offsets {a.start}..{a.end - 1}: {a.records} records"
        gaps = "".join(f"; gap {g0}..{g1 - 1}: {why}" for g0, g1, why in a.gaps)
        print(f"partition {a.partition}: {what}{gaps}")
    print(f"table {taken.uri} version {taken.version}")
    return 0


def _maintain(rt: Runtime, args: argparse.Namespace) -> int:
    from amends_pipeline.ops.snapshot import existing_table
    from amends_pipeline.snapshot.table import SnapshotError

    try:
        table = existing_table(rt)
        if args.compact:
            done = table.compact()
            print(f"compacted: {done.get('numFilesRemoved', 0)} files into {done.get('numFilesAdded', 0)}")
        if args.vacuum is not None:
            files = table.vacuum(args.vacuum, dry_run=False)
            print(f"vacuumed: {len(files)} data files no version of the last {args.vacuum} hours refers to")
        print(f"table {table.uri} version {table.version()}")
    except SnapshotError as e:
        raise UsageError(str(e)) from None
    return 0
