"""Rebuilds through Dagster: a backfill of the per-partition ``refold`` assets into a rebuild namespace.

The backfill is launched with Dagster's own command line (so it is exactly
what an operator would type, and it shows on the UI's backfill page):

    dagster job backfill -w workspace.yaml -j refold_job --all --noprompt \\
        --tags '{"amends/namespace": "<rebuild namespace>"}'

Its runs go through the instance's queued run coordinator, so a
``dagster-daemon`` must be running on the same ``DAGSTER_HOME`` (``make up``
starts one). ``wait`` follows the runs until every one has finished.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from amends_core.errors import OperationError
from amends_pipeline.errors import UsageError
from amends_pipeline.ops.tags import NAMESPACE_TAG

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = ROOT / "workspace.yaml"
REFOLD_JOB = "refold_job"


class BackfillFailed(OperationError):
    """The backfill could not be launched, or some of its runs did not succeed."""


@dataclass(frozen=True, slots=True)
class BackfillResult:
    backfill_id: str
    runs: int
    seconds: float


def command(namespace: str) -> list[str]:
    dagster = str(Path(sys.executable).with_name("dagster"))
    return [
        dagster, "job", "backfill", "-w", str(WORKSPACE), "-j", REFOLD_JOB, "--all", "--noprompt",
        "--tags", json.dumps({NAMESPACE_TAG: namespace}),
    ]


def launch(namespace: str) -> str:
    """Launch the backfill; returns its ID."""
    if not os.environ.get("DAGSTER_HOME"):
        msg = (
            "DAGSTER_HOME is not set: a rebuild by backfill needs the Dagster instance the daemon"
            " serves (`make up` starts both), or run the rebuild with --in-process"
        )
        raise UsageError(msg)
    r = subprocess.run(command(namespace), cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    found = re.search(r"Launched backfill job `([^`]+)`", r.stdout + r.stderr)
    if r.returncode != 0 or not found:
        tail = " ".join((r.stdout + r.stderr).split())[-400:]
        msg = f"dagster job backfill failed (exit {r.returncode}): {tail}"
        raise BackfillFailed(msg)
    return found.group(1)


def wait(backfill_id: str, *, timeout: float = 600.0, queued_timeout: float = 60.0) -> BackfillResult:
    """Follow the backfill's runs until all finished; BackfillFailed unless every one succeeded."""
    import dagster as dg

    t0 = time.monotonic()
    done = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
    with dg.DagsterInstance.get() as instance:
        while True:
            runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
            statuses = [r.status for r in runs]
            if runs and all(s in done for s in statuses):
                break
            waited = time.monotonic() - t0
            all_queued = bool(statuses) and all(s == dg.DagsterRunStatus.QUEUED for s in statuses)
            if all_queued and waited > queued_timeout:
                msg = (
                    f"backfill {backfill_id}: runs still queued after {queued_timeout:.0f}s;"
                    " is a dagster-daemon running on this DAGSTER_HOME? (`make up` starts one)"
                )
                raise BackfillFailed(msg)
            if waited > timeout:
                msg = f"backfill {backfill_id}: not finished after {timeout:.0f}s ({statuses})"
                raise BackfillFailed(msg)
            time.sleep(1.0)
    bad = [r.run_id for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
    if bad:
        msg = f"backfill {backfill_id}: {len(bad)} of {len(runs)} runs did not succeed ({', '.join(bad)})"
        raise BackfillFailed(msg)
    return BackfillResult(backfill_id, len(runs), time.monotonic() - t0)
