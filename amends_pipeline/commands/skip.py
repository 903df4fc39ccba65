"""``amends skip``: move one partition past the one record its processing stops on, audited."""

from __future__ import annotations

import argparse
import sys

from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.errors import UsageError
from amends_pipeline.inputs import load_config
from amends_pipeline.ops.skip import (
    MAX_OPERATOR,
    MAX_REASON,
    SkipRefused,
    check_text,
    default_operator,
    skip_record,
)
from amends_pipeline.runtime import Runtime


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "skip",
        help="skip the source record a partition is stopped on by an operation error (audited)",
        description=(
            "For a partition whose worker stops on an operation error (a daily close outside"
            " signed 64-bit): records who skipped which record, why and when (with the raw"
            " record) in PostgreSQL and moves that partition's frontier just past it, in one"
            " transaction fenced by a freshly claimed ownership epoch. Only the record the"
            " partition processes next may be skipped, and only when processing it fails at"
            " the current state (checked by running it in a transaction that is rolled back)."
            " A worker still running on the partition is fenced out and must be restarted; the"
            " next worker continues after the skipped offset. `amends verify` then reports"
            " PASS_WITH_EXCLUSIONS listing the skip, accepted only when --expect lists it"
            ' ("skips": [{"partition", "offset"}]). Skipping an offset again changes nothing'
            " and says so (exit 0). Exit 0 skipped or already skipped; 1 refused (the line says"
            " why) or fenced; 2 on unusable arguments or environment."
        ),
    )
    add_config(p)
    p.add_argument("--partition", type=int, required=True, metavar="P", help="source partition")
    p.add_argument("--offset", type=int, required=True, metavar="O", help="source offset to skip")
    p.add_argument(
        "--reason", required=True, metavar="TEXT",
        help=f"why the record is skipped (required, one line, at most {MAX_REASON} characters)",
    )
    p.add_argument(
        "--operator", metavar="NAME",
        help=f"who skips it (default: the OS user; at most {MAX_OPERATOR} characters)",
    )
    p.set_defaults(func=run)


@operational
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    try:
        reason = check_text("--reason", args.reason, MAX_REASON)
        operator = check_text(
            "--operator", default_operator() if args.operator is None else args.operator,
            MAX_OPERATOR,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not 0 <= args.partition < cfg.partitions:
        msg = f"partition {args.partition} is not configured (0..{cfg.partitions - 1})"
        raise UsageError(msg)
    if args.offset < 0:
        msg = "--offset must be 0 or more"
        raise UsageError(msg)
    try:
        out = skip_record(Runtime(cfg), args.partition, args.offset, reason, operator)
    except SkipRefused as e:
        print(f"amends skip: refused: {e}", file=sys.stderr)
        return 1
    s = out.entry
    where = f"partition {s.partition} offset {s.offset}"
    if out.already:
        print(
            f"{where} was already skipped by {s.operator} at {s.when} ({s.reason!r});"
            " nothing changed"
        )
    else:
        print(
            f"skipped {where} ({s.error}); frontier {s.frontier_before} -> {s.offset + 1};"
            f" epoch {s.epoch} claimed (a worker still running on partition {s.partition} is"
            f" fenced out: restart it); recorded by {s.operator} at {s.when}: {s.reason!r}"
        )
    return 0
