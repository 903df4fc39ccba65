"""``amends verify``: certify the view against the independent oracle at a complete boundary."""

from __future__ import annotations

import argparse
import json
import sys
import time

from amends_core.verify import ExpectationDifference, Report, VerifyStatus
from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.errors import UsageError
from amends_pipeline.inputs import EXPECT_FORMAT, load_config, load_expectations
from amends_pipeline.ops.verify import verify_namespace
from amends_pipeline.runtime import Runtime
from amends_pipeline.text import terminal_safe


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "verify",
        help="compare the view with the oracle over the source topic",
        description=(
            "Establishes a complete boundary (the provisioned source incarnation, still holding"
            " every record the worker consumed; worker frontier at the source end, outbox"
            " drained, view frontier at the output end), takes consistent snapshots, recomputes"
            " everything from the source"
            " topic with the independent oracle and prints the report: PASS,"
            " PASS_WITH_EXCLUSIONS, BLOCKED, DRIFT, INCOMPLETE or ERROR with every differing"
            " row, the rejections found (by reason, with partition/offset) and the conflicts."
            " With --expect it also prints which expected entries are missing and which found"
            " entries are unexpected. Exit 0 only for an accepted report: PASS, or"
            " PASS_WITH_EXCLUSIONS when --expect lists exactly the rejections, conflicts and"
            " operator skips (`amends skip`) found. A source partition stopped by an operation"
            " error is ERROR naming the partition, offset, error and the `amends skip` command"
            " line. Exit 1 otherwise; 2 for an unusable expectations file (one line naming the"
            " field at fault) or environment."
        ),
    )
    add_config(p)
    p.add_argument(
        "--expect", metavar="EXPECTED.json",
        help='{"rejections":[{"partition","offset","reason"}],"conflicts":[{"item","location","txn_id","revision"}],'
        '"skips":[{"partition","offset"}]} (skips: the operator skips, optional)',
    )
    p.add_argument(
        "--json", action="store_true",
        help="print the machine-readable report (with --expect: plus expectation_difference)",
    )
    p.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS",
        help="while the report is INCOMPLETE (the roles may still be catching up), try again"
        " every second for up to SECONDS before reporting (default 0: report at once)",
    )
    p.add_argument(
        "--max-rows", type=int, default=20,
        help="text report: at most this many entries per list (default 20)",
    )
    p.set_defaults(func=run)


@operational
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    rej, con, skips = load_expectations(args.expect)
    if not args.wait >= 0:
        msg = "--wait takes a number of seconds, 0 or more"
        raise UsageError(msg)
    rt = Runtime(cfg)
    deadline = time.monotonic() + args.wait
    report = verify_namespace(rt, args.config)
    while report.status is VerifyStatus.INCOMPLETE and time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        report = verify_namespace(rt, args.config)
    accepted = report.accepts(rej, con, skips)
    diff = report.expectation_difference(rej, con, skips) if args.expect is not None else None
    if args.json:
        doc = report.to_json()
        if diff is not None:
            doc["expectation_difference"] = diff.to_json()
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        print(terminal_safe(report.render(args.max_rows)))  # data is escaped; JSON stays exact
        if diff is not None:
            print(terminal_safe(diff.render(args.max_rows)))
    print(f"accepted: {'yes' if accepted else 'no'}{_why_not(report, diff, accepted)}", file=sys.stderr)
    return 0 if accepted else 1


def _why_not(report: Report, diff: ExpectationDifference | None, accepted: bool) -> str:
    if accepted:
        return ""
    status = report.status
    if status not in (VerifyStatus.PASS, VerifyStatus.PASS_WITH_EXCLUSIONS):
        return f" ({status.value} is never accepted)"
    if diff is None and report.skips:
        return (
            f" ({status.value}: acknowledge the {len(report.rejections)} rejections,"
            f" {len(report.conflicts)} conflicts and {len(report.skips)} operator skips above"
            f' with --expect {EXPECT_FORMAT[:-1]}, "skips": [{{"partition", "offset"}}]}})'
        )
    if diff is None:
        return (
            f" ({status.value}: acknowledge the {len(report.rejections)} rejections and"
            f" {len(report.conflicts)} conflicts above with --expect {EXPECT_FORMAT})"
        )
    return f" ({status.value}, but --expect does not match: see the missing and unexpected entries)"
