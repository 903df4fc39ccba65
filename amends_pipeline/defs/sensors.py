"""Sensors: continuous processing with cursors that are only hints.

* ``source_sensor`` requests a ``refold_job`` run for each partition whose
  source end passed the worker frontier; the run key carries the target offset
  and a retry count, so a failed run never wedges its key.
* ``relay_sensor`` and ``view_sensor`` publish and apply inside the tick
  (time-boxed well under the 60 s evaluation limit) and report what they did as
  asset materializations.
* ``boundary_sensor`` launches ``boundary_job`` when every partition has
  drained to a common boundary that was not verified yet.

Database frontiers and fencing are the truth: a restarted daemon, a lost
cursor or a duplicate request costs at most a no-op run.
"""


import json
import time

import dagster as dg

from amends_pipeline.defs import metadata
from amends_pipeline.defs.assets import published_envelopes, view
from amends_pipeline.defs.jobs import PARTITION_TAG, TARGET_TAG, boundary_job, oracle_part_job, refold_job
from amends_pipeline.defs.resources import AmendsResource
from amends_pipeline.ops import orchestration
from amends_pipeline.ops import verify as verify_ops
from amends_pipeline.ops.sensing import boundary_request, live_partitions, oracle_part_plan, refold_requests

TICK_BUDGET_SECONDS = 20.0
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def _runs(context: dg.SensorEvaluationContext, statuses: list[dg.DagsterRunStatus]) -> list[dg.DagsterRun]:
    return list(
        context.instance.get_runs(
            filters=dg.RunsFilter(job_name=refold_job.name, statuses=statuses), limit=200
        )
    )


@dg.sensor(job=refold_job, minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING)
def source_sensor(context: dg.SensorEvaluationContext, amends: AmendsResource) -> dg.SensorResult:
    """Request refold runs for partitions with unprocessed source records."""
    snap = orchestration.snapshot(amends.runtime())
    records = context.instance.get_run_records(
        filters=dg.RunsFilter(job_name=refold_job.name, statuses=IN_FLIGHT), limit=200
    )
    in_flight = live_partitions(
        [
            (
                int(r.dagster_run.tags[PARTITION_TAG]),
                r.dagster_run.status == dg.DagsterRunStatus.QUEUED,
                r.start_time or r.create_timestamp.timestamp(),
            )
            for r in records if PARTITION_TAG in r.dagster_run.tags
        ],
        now=time.time(),
    )
    failed = [
        (int(r.tags[PARTITION_TAG]), int(r.tags[TARGET_TAG]))
        for r in _runs(context, [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED])
        if PARTITION_TAG in r.tags and TARGET_TAG in r.tags
    ]
    wanted = refold_requests(snap, in_flight, failed)
    requests = [
        dg.RunRequest(
            run_key=w.run_key, partition_key=str(w.partition),
            tags={PARTITION_TAG: str(w.partition), TARGET_TAG: str(w.target)},
        )
        for w in wanted
    ]
    if not requests:
        why = "every partition's worker frontier is at its source end or a run is in flight"
        return dg.SensorResult(skip_reason=why)
    return dg.SensorResult(run_requests=requests, cursor=snap.boundary_key)


@dg.sensor(minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING)
def relay_sensor(context: dg.SensorEvaluationContext, amends: AmendsResource) -> dg.SensorResult:
    """Publish pending outbox rows within the tick, then apply them to the view at once.

    Applying right after publishing saves a whole view-sensor interval (ticks
    come at most every 5 s); both calls are idempotent, so the view sensor
    finding nothing left to do afterwards is the normal case.
    """
    rt = amends.runtime()
    done = orchestration.relay(rt, budget_seconds=TICK_BUDGET_SECONDS / 2)
    with rt.store("amends-relay") as store:
        topic = rt.manifest(store).output_topic
    events: list[dg.AssetMaterialization] = [
        dg.AssetMaterialization(
            published_envelopes.key, partition=str(s.partition), metadata=metadata.relay(s, topic)
        )
        for s in done if s.published
    ]
    moved = [s.partition for s in done if s.published]
    cursor = context.cursor
    if moved:
        view_events, cursor = _view_events(
            orchestration.apply_view(rt, moved, budget_seconds=TICK_BUDGET_SECONDS / 2), cursor
        )
        events += view_events
    if not events:
        busy = [s.partition for s in done if s.busy]
        why = f"partitions {busy} are held by a long-running relay" if busy else "no pending outbox rows"
        return dg.SensorResult(skip_reason=why, cursor=cursor)
    return dg.SensorResult(asset_events=events, cursor=cursor)


@dg.sensor(minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING)
def view_sensor(context: dg.SensorEvaluationContext, amends: AmendsResource) -> dg.SensorResult:
    """Apply published envelopes to the view within the tick.

    One materialization per partition that moved, and one when a partition
    stops or resumes, so the view asset never looks healthy while it is not.
    """
    done = orchestration.apply_view(amends.runtime(), budget_seconds=TICK_BUDGET_SECONDS)
    events, cursor = _view_events(done, context.cursor)
    if not events:
        stopped = [s.partition for s in done if s.stopped]
        why = f"view partitions {stopped} are stopped" if stopped else "the view is at the output end"
        return dg.SensorResult(skip_reason=why, cursor=cursor)
    return dg.SensorResult(asset_events=events, cursor=cursor)


def _view_events(
    done: list[orchestration.ViewSummary], cursor: str | None
) -> tuple[list[dg.AssetMaterialization], str]:
    """Materializations for partitions that delivered or whose stop state changed.

    The cursor remembers each partition's last reported stop diagnostic; it is
    only a hint (a lost cursor repeats one materialization per stopped partition).
    """
    try:
        reported = json.loads(cursor) if cursor else {}
    except ValueError:
        reported = {}
    if not isinstance(reported, dict):
        reported = {}
    events = []
    for s in done:
        key = str(s.partition)
        if s.delivered or reported.get(key) != s.stopped:
            events.append(dg.AssetMaterialization(view.key, partition=key, metadata=metadata.view(s)))
        if s.stopped:
            reported[key] = s.stopped
        else:
            reported.pop(key, None)
    return events, json.dumps(reported, sort_keys=True)


BOUNDARY_TAG = "amends/boundary"


@dg.sensor(
    jobs=[boundary_job, oracle_part_job], minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def boundary_sensor(context: dg.SensorEvaluationContext, amends: AmendsResource) -> dg.SensorResult:
    """Launch the verification when every partition drained to a boundary not verified yet.

    With ``AMENDS_ORACLE_RUNS=per-partition`` it first requests one ``oracle_part_job``
    run per partition whose stored oracle part does not match the boundary, and launches
    the verification once none is left to wait for.
    """
    rt = amends.runtime()
    snap = orchestration.snapshot(rt)
    req = boundary_request(snap, context.cursor)
    if req is None:
        why = "already verified" if snap.drained else "some partition has not drained yet"
        return dg.SensorResult(skip_reason=f"boundary {snap.boundary_key}: {why}")
    tags = {BOUNDARY_TAG: snap.boundary_key}
    if amends.split_oracle:
        runs = {
            int(r.tags[PARTITION_TAG]): r.status in IN_FLIGHT
            for r in context.instance.get_runs(
                filters=dg.RunsFilter(job_name=oracle_part_job.name, tags=tags), limit=500
            )
            if PARTITION_TAG in r.tags
        }
        request, ready = oracle_part_plan(verify_ops.stale_parts(rt), runs)
        if request:
            return dg.SensorResult(run_requests=[
                dg.RunRequest(
                    run_key=f"{req}:oracle:{p}", job_name=oracle_part_job.name, partition_key=str(p),
                    tags={**tags, PARTITION_TAG: str(p)},
                )
                for p in request
            ])
        if not ready:
            why = f"boundary {snap.boundary_key}: waiting for partitions' oracle runs"
            return dg.SensorResult(skip_reason=why)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=req, job_name=boundary_job.name, tags=tags)],
        cursor=snap.boundary_key,
    )
