"""One static Dagster partition per source partition of the served namespace."""

from __future__ import annotations

import dagster as dg

from amends_pipeline.defs.resources import location_config


def partitions_def(count: int | None = None) -> dg.StaticPartitionsDefinition:
    n = location_config().partitions if count is None else count
    return dg.StaticPartitionsDefinition([str(p) for p in range(n)])


SOURCE_PARTITIONS = partitions_def()
