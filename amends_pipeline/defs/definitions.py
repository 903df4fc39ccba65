"""The Dagster code location of amends: one ``Definitions`` object, loaded by ``workspace.yaml``.

It serves the namespace whose configuration ``AMENDS_CONFIG`` names (default:
the worked example), with one static partition per source partition. See
docs/dagster.md.
"""

from __future__ import annotations

import dagster as dg

from amends_pipeline.defs.assets import (
    certified_balances,
    oracle,
    oracle_partition,
    published_envelopes,
    refold,
    source_snapshot,
    view,
)
from amends_pipeline.defs.jobs import boundary_job, oracle_part_job, refold_job
from amends_pipeline.defs.resources import AmendsResource, resource_from_env
from amends_pipeline.defs.sensors import boundary_sensor, relay_sensor, source_sensor, view_sensor


def build(resource: AmendsResource) -> dg.Definitions:
    """The definitions bound to one resource (the code location's, or a test's or the demo's)."""
    return dg.Definitions(
        assets=[
            source_snapshot, refold, published_envelopes, view, oracle_partition, oracle, certified_balances
        ],
        jobs=[refold_job, boundary_job, oracle_part_job],
        sensors=[source_sensor, relay_sensor, view_sensor, boundary_sensor],
        resources={"amends": resource},
    )


defs = build(resource_from_env())
