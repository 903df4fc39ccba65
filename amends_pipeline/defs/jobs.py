"""Jobs: per-partition refold, and the boundary job (oracle, blocking verification, certified results).

Both run their steps in one process: steps are short and the blocking check
gates ``certified_balances`` only inside the same run.
"""

from __future__ import annotations

import dagster as dg

from amends_pipeline.defs.assets import certified_balances, oracle, oracle_partition, refold, source_snapshot
from amends_pipeline.ops.tags import PARTITION_TAG, TARGET_TAG

__all__ = ["PARTITION_TAG", "TARGET_TAG", "boundary_job", "oracle_part_job", "refold_job"]

refold_job = dg.define_asset_job(
    "refold_job",
    selection=dg.AssetSelection.assets(source_snapshot, refold),
    executor_def=dg.in_process_executor,
    # Each run refolds for at most REFOLD_BUDGET_SECONDS (the sensor asks for another for
    # the rest); run monitoring fails a run older than this, such as one whose process
    # died with a killed daemon, so it never holds its partition's concurrency slot.
    tags={"dagster/max_runtime": "120"},
    description="Snapshot one source partition and refold it from the database frontier to that end.",
)

boundary_job = dg.define_asset_job(
    "boundary_job",
    selection=dg.AssetSelection.assets(oracle, certified_balances),
    executor_def=dg.in_process_executor,
    description="Oracle, the blocking verification check and, only when it passes, certified balances.",
)

oracle_part_job = dg.define_asset_job(
    "oracle_part_job",
    selection=dg.AssetSelection.assets(oracle_partition),
    executor_def=dg.in_process_executor,
    description=(
        "One source partition's oracle, stored for the verification check to combine"
        " (AMENDS_ORACLE_RUNS=per-partition): a run per partition, on any host."
    ),
)
