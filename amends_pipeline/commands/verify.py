"""``amends verify``: certify the view against the independent oracle at a complete boundary."""

from __future__ import annotations

import argparse
import json
import sys

from amends_core.ledger import Conflict, RejectReason, StockKey
from amends_core.result import RejectionRef
from amends_pipeline.commands._common import load_config, operational, read_bytes
from amends_pipeline.errors import UsageError
from amends_pipeline.ops.verify import verify_namespace
from amends_pipeline.runtime import Runtime


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
            " row. Exit 0 only for an accepted report: PASS, or PASS_WITH_EXCLUSIONS when"
            " --expect lists exactly the rejections and conflicts found. Exit 1 otherwise."
        ),
    )
    p.add_argument("--config", required=True, metavar="CONFIG.json")
    p.add_argument(
        "--expect", metavar="EXPECTED.json",
        help='{"rejections":[{"partition","offset","reason"}],"conflicts":[{"item","location","txn_id","revision"}]}',
    )
    p.add_argument("--json", action="store_true", help="print the machine-readable report")
    p.add_argument("--max-rows", type=int, default=20)
    p.set_defaults(func=run)


def load_expectations(path: str | None) -> tuple[list[RejectionRef], list[Conflict]]:
    if path is None:
        return [], []
    try:
        doc = json.loads(read_bytes(path, "expectations file"))
        rej = [
            RejectionRef(r["partition"], r["offset"], RejectReason(r["reason"]))
            for r in doc.get("rejections", [])
        ]
        con = [
            Conflict(StockKey(c["item"], c["location"]), c["txn_id"], c["revision"])
            for c in doc.get("conflicts", [])
        ]
    except (ValueError, KeyError, TypeError) as e:
        msg = f"unusable expectations file {path!r}: {e}"
        raise UsageError(msg) from None
    return rej, con


@operational
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    rej, con = load_expectations(args.expect)
    report = verify_namespace(Runtime(cfg))
    if args.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        print(report.render(args.max_rows))
    accepted = report.accepts(rej, con)
    print(f"accepted: {'yes' if accepted else 'no'}", file=sys.stderr)
    return 0 if accepted else 1
