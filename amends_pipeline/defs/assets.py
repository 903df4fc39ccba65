"""Assets: source snapshots, per-partition refold, relay and view, oracle, certified results.

Each body is a few lines over ``amends_pipeline.ops``; the database frontiers
and fencing are the truth, so a repeated or concurrent materialization is safe.
"""


from typing import Any

import dagster as dg

from amends_pipeline.defs import metadata
from amends_pipeline.defs.checks import verification_result, verification_spec
from amends_pipeline.defs.partitions import SOURCE_PARTITIONS
from amends_pipeline.defs.resources import AmendsResource
from amends_pipeline.defs.verification_record import latest_verification
from amends_pipeline.inputs import load_expectations
from amends_pipeline.ops import certify, orchestration, plot
from amends_pipeline.ops import snapshot as snapshots
from amends_pipeline.ops import verify as verify_ops
from amends_pipeline.ops.tags import NAMESPACE_TAG
from amends_pipeline.postgres.reports import read_certified
from amends_pipeline.runtime import Runtime
from amends_pipeline.snapshot.table import SnapshotError

GROUP = "amends"


REFOLD_BUDGET_SECONDS = 60.0
"""A refold run stops after this long; the source sensor requests another for what is left."""


def _runtime(context: dg.AssetExecutionContext, amends: AmendsResource) -> Runtime:
    return amends.runtime(context.run.tags.get(NAMESPACE_TAG))


@dg.asset(partitions_def=SOURCE_PARTITIONS, group_name=GROUP, kinds={"kafka", "deltalake"})
def source_snapshot(context: dg.AssetExecutionContext, amends: AmendsResource) -> dg.MaterializeResult[Any]:
    """The source partition's new records appended to the snapshot table (Delta Lake), exactly once,
    with the retained range, incarnation and the worker's lag."""
    rt, p = _runtime(context, amends), int(context.partition_key)
    try:
        taken = snapshots.take(rt, [p])
        table = metadata.snapshot_table(taken, *snapshots.table_stats(taken, p))
    except SnapshotError as e:
        # Refolding goes on without the copy: the lag shows in amends view and here, and the
        # next run appends what this one could not. A stalled partition would be worse.
        context.log.warning(f"source snapshot not taken: {e}")
        table = {"snapshot_error": str(e)}
    snap = orchestration.snapshot(rt, [p])
    state = metadata.partition_state(snap.partitions[0], snap)
    return dg.MaterializeResult(metadata={**state, **table})


def _snapshot_end(context: dg.AssetExecutionContext) -> int | None:
    """The source end recorded by this partition's source_snapshot in this run (None: the source end)."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=source_snapshot.key, asset_partitions=[context.partition_key]),
        limit=1,
    ).records
    if not records or records[0].run_id != context.run.run_id or records[0].asset_materialization is None:
        return None
    value = records[0].asset_materialization.metadata.get("source_high")
    return int(value.value) if value is not None else None


@dg.asset(partitions_def=SOURCE_PARTITIONS, group_name=GROUP, deps=[source_snapshot], kinds={"postgres"})
def refold(context: dg.AssetExecutionContext, amends: AmendsResource) -> dg.MaterializeResult[Any]:
    """Incremental processing from the database frontier to the snapshot's end, in fenced batches."""
    rt = _runtime(context, amends)
    summary = orchestration.refold(
        rt, int(context.partition_key), until=_snapshot_end(context), budget_seconds=REFOLD_BUDGET_SECONDS
    )
    return dg.MaterializeResult(metadata={"namespace": rt.cfg.namespace, **metadata.refold(summary)})


published_envelopes = dg.AssetSpec(
    "published_envelopes",
    deps=[refold],
    partitions_def=SOURCE_PARTITIONS,
    group_name=GROUP,
    kinds={"kafka"},
    description="Outbox rows published to the output topic; materialized by the relay sensor.",
)

view = dg.AssetSpec(
    "view",
    deps=[published_envelopes],
    partitions_def=SOURCE_PARTITIONS,
    group_name=GROUP,
    kinds={"postgres"},
    description="The version-aware materialized view; materialized by the view sensor.",
)


@dg.asset(partitions_def=SOURCE_PARTITIONS, group_name=GROUP, deps=[source_snapshot], kinds={"polars"})
def oracle_partition(context: dg.AssetExecutionContext, amends: AmendsResource) -> dg.MaterializeResult[Any]:
    """One source partition's oracle, computed by a run of its own and stored for the check to combine.

    Launched per partition by the boundary sensor when ``AMENDS_ORACLE_RUNS=per-partition``,
    so partitions' oracles run as separate runs, on separate hosts where the run launcher
    puts them; the ``oracle`` asset's check uses each stored part that matches its boundary.
    """
    stored = verify_ops.oracle_part(amends.runtime(), int(context.partition_key))
    return dg.MaterializeResult(metadata=metadata.oracle_part(stored))


# No return annotation: an asset with check specs has an output per check, and Dagster would read
# an annotation as the types of all of them.
@dg.asset(
    group_name=GROUP, deps=[source_snapshot, oracle_partition], kinds={"polars"},
    check_specs=[verification_spec],
)
def oracle(amends: AmendsResource):  # type: ignore[no-untyped-def]
    """The independent Polars recomputation of the full source history (the snapshot, then the
    topic), and the blocking ``verification`` check of the view against it."""
    expected = load_expectations(amends.expect_path or None)
    summary, v = certify.oracle_and_verification(
        amends.runtime().reading(), expected, amends.config_path, use_parts=amends.split_oracle
    )
    return dg.MaterializeResult(
        metadata=metadata.oracle(summary),
        check_results=[verification_result(v.accepted, metadata.verification(v))],
    )




@dg.asset(group_name=GROUP, deps=[oracle, view], kinds={"postgres"})
def certified_balances(
    context: dg.AssetExecutionContext, amends: AmendsResource
) -> dg.MaterializeResult[Any]:
    """Balances and alerts vouched for by the latest accepted verification, as PostgreSQL tables."""
    v = latest_verification(context.instance)
    rt = amends.runtime()
    boundary, status = (v.boundary, v.status) if v else ("", "")
    counts = certify.certify(rt, boundary, status, v is not None and v.passed)
    reader = rt.reading()
    with reader.store("amends-certify") as store:
        balances, alerts = read_certified(store)
    alert_days = {(a[0], a[1], a[2]) for a in alerts}
    preview = [(b[0], b[1], b[2], b[3], "yes" if (b[0], b[1], b[2]) in alert_days else "") for b in balances]
    chart = dg.MetadataValue.md(plot.certified_markdown(reader))
    views = metadata.view_partitions(orchestration.snapshot(reader).partitions)
    return dg.MaterializeResult(
        metadata={**metadata.certified(counts, boundary, preview), **views, "balance_history": chart}
    )
