"""The blocking ``verification`` check: the view against the oracle at a complete boundary."""


import dagster as dg

from amends_pipeline.commands.verify import load_expectations
from amends_pipeline.defs import metadata
from amends_pipeline.defs.assets import oracle, view
from amends_pipeline.defs.resources import AmendsResource
from amends_pipeline.ops.certify import verify_boundary


@dg.asset_check(asset=oracle, name="verification", blocking=True, additional_deps=[view])
def verification(amends: AmendsResource) -> dg.AssetCheckResult:
    """PASS (or an expected PASS_WITH_EXCLUSIONS) at a boundary that held still; ERROR severity otherwise.

    A source partition stopped by an operation error fails the check with its partition,
    offset, error and the ``amends skip`` command line in the metadata.
    """
    v = verify_boundary(
        amends.runtime(), load_expectations(amends.expect_path or None), amends.config_path
    )
    return dg.AssetCheckResult(
        passed=v.accepted, severity=dg.AssetCheckSeverity.ERROR, metadata=metadata.verification(v)
    )
