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


import time

import dagster as dg

from amends_pipeline.defs import metadata
from amends_pipeline.defs.assets import published_envelopes, view
from amends_pipeline.defs.jobs import PARTITION_TAG, TARGET_TAG, boundary_job, refold_job
from amends_pipeline.defs.resources import AmendsResource
from amends_pipeline.ops import orchestration
from amends_pipeline.ops.sensing import boundary_request, live_partitions, refold_requests

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
    if moved:
        events += _view_events(orchestration.apply_view(rt, moved, budget_seconds=TICK_BUDGET_SECONDS / 2))
    if not events:
        busy = [s.partition for s in done if s.busy]
        why = f"partitions {busy} are held by a long-running relay" if busy else "no pending outbox rows"
        return dg.SensorResult(skip_reason=why)
    return dg.SensorResult(asset_events=events)


@dg.sensor(minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING)
def view_sensor(context: dg.SensorEvaluationContext, amends: AmendsResource) -> dg.SensorResult:
    """Apply published envelopes to the view within the tick; one materialization per partition that moved."""
    events = _view_events(orchestration.apply_view(amends.runtime(), budget_seconds=TICK_BUDGET_SECONDS))
    if not events:
        return dg.SensorResult(skip_reason="the view is at the output end")
    return dg.SensorResult(asset_events=events)


def _view_events(done: list[orchestration.ViewSummary]) -> list[dg.AssetMaterialization]:
    return [
        dg.AssetMaterialization(view.key, partition=str(s.partition), metadata=metadata.view(s))
        for s in done if s.delivered
    ]


@dg.sensor(job=boundary_job, minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING)
def boundary_sensor(context: dg.SensorEvaluationContext, amends: AmendsResource) -> dg.SensorResult:
    """Launch the verification when every partition drained to a boundary not verified yet."""
    snap = orchestration.snapshot(amends.runtime())
    req = boundary_request(snap, context.cursor)
    if req is None:
        why = "already verified" if snap.drained else "some partition has not drained yet"
        return dg.SensorResult(skip_reason=f"boundary {snap.boundary_key}: {why}")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=req, tags={"amends/boundary": snap.boundary_key})],
        cursor=snap.boundary_key,
    )
