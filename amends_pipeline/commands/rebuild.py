"""``amends rebuild``: reconstruct a namespace into a fresh one, then verify (dry run by default)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.commands._progress import Progress
from amends_pipeline.errors import UsageError
from amends_pipeline.inputs import load_config
from amends_pipeline.ops.replay import rebuild
from amends_pipeline.runtime import Runtime


def register(sub: Subparsers) -> None:
    r = sub.add_parser(
        "rebuild",
        help="reconstruct the namespace into a fresh namespace and output topic, then verify",
        description=(
            "Checks that the whole source is still held (by the topic or, where retention"
            " deleted the early history, by the source snapshot: AMENDS_SNAPSHOT_URI, `amends"
            " snapshot`), then (with --execute) registers"
            " the new namespace, binds it to the same source incarnation and the new output"
            " topic, refolds every partition through a Dagster backfill of refold_job (tagged"
            " amends/namespace=NEW; needs DAGSTER_HOME and a running dagster-daemon, see"
            " docs/dagster.md) or, with --in-process, with the production worker here; then"
            " publishes and applies the output, and verifies the result against the oracle."
            " The original namespace is untouched. Dry run by default. Exit 0 when the"
            " rebuild verifies (or the dry run finds it possible)."
        ),
    )
    add_config(r)
    r.add_argument("--new-namespace", required=True)
    r.add_argument("--output-topic", required=True)
    r.add_argument("--execute", action="store_true")
    r.add_argument(
        "--in-process", action="store_true",
        help="run the worker here instead of through a Dagster backfill of refold_job",
    )
    r.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    r.add_argument("--json", action="store_true", help="print the verification report as JSON")
    r.set_defaults(func=run_rebuild)


def _backfill(nrt: Runtime) -> str:
    """Refold the rebuild namespace through a Dagster backfill and wait for its runs."""
    from amends_pipeline.ops import backfill

    done = backfill.wait(backfill.launch(nrt.cfg.namespace))
    return f"backfill {done.backfill_id}: {done.runs} refold runs succeeded in {done.seconds:.1f}s"


@operational
def run_rebuild(args: argparse.Namespace) -> int:
    rt = Runtime(load_config(args.config))
    refold = None if args.in_process or not args.execute else _backfill
    if refold is not None and not os.environ.get("DAGSTER_HOME"):
        msg = (
            "DAGSTER_HOME is not set: a rebuild goes through a Dagster backfill, which needs the"
            " instance a dagster-daemon serves (`make dagster`, docs/dagster.md); or pass --in-process"
        )
        raise UsageError(msg)
    progress = Progress("rebuild", quiet=args.quiet)
    plan = rebuild(
        rt, args.new_namespace, args.output_topic, execute=args.execute, refold=refold, say=progress.step
    )
    if not plan.executed:
        print(
            f"rebuild possible: {rt.cfg.namespace!r} -> {plan.namespace!r} from {plan.source_topic!r}"
            f" into {plan.output_topic!r} (dry run; --execute runs it)"
        )
        return 0
    assert plan.report is not None
    if args.json:
        doc = {"namespace": plan.namespace, "output_topic": plan.output_topic, "accepted": plan.accepted,
               "refolded_by": plan.refolded_by, "report": plan.report.to_json()}
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return 0 if plan.accepted else 1
    if plan.refolded_by:
        print(plan.refolded_by)
    print(plan.report.render())
    verdict = "verified" if plan.accepted else "NOT verified"
    print(f"rebuild {verdict} (exclusions compared with the original namespace)", file=sys.stderr)
    return 0 if plan.accepted else 1
