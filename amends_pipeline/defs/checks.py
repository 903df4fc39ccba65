"""The blocking ``verification`` check: the view against the oracle at a complete boundary.

It is a check spec of the ``oracle`` asset, which evaluates it from the same oracle
computation it materializes: one full recomputation per boundary, not two.
"""


from typing import Any

import dagster as dg

VERIFICATION = "verification"

verification_spec = dg.AssetCheckSpec(
    VERIFICATION,
    asset="oracle",
    additional_deps=["view"],
    blocking=True,
    description=(
        "PASS (or an expected PASS_WITH_EXCLUSIONS) at a boundary that held still; ERROR"
        " severity otherwise. A source partition stopped by an operation error fails the check"
        " with its partition, offset, error and the `amends skip` command line in the metadata."
    ),
)


def verification_result(passed: bool, md: dict[str, Any]) -> dg.AssetCheckResult:
    """The check's result as the ``oracle`` asset reports it (ERROR severity: blocking)."""
    return dg.AssetCheckResult(
        check_name=VERIFICATION, passed=passed, severity=dg.AssetCheckSeverity.ERROR, metadata=md
    )
