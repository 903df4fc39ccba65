"""When a recorded snapshot coverage may stand in for comparing old consumed offsets again."""

from __future__ import annotations

from amends_pipeline.ops.snapshot import Pinned
from amends_pipeline.ops.verify import covered_since
from amends_pipeline.postgres.oracle_parts import Coverage
from amends_pipeline.snapshot.table import Identity, SnapshotTable

TABLE = SnapshotTable("/nowhere", Identity("src", "topic", 1))


def pinned(table_id: str, version: int, end: int = 500) -> Pinned:
    return Pinned(TABLE, version, {0: end}, table_id)


COVER = Coverage(0, "table-a", 7, 400)


def test_the_same_table_at_the_claim_s_version_or_later_uses_it() -> None:
    assert covered_since(COVER, pinned("table-a", 7), 1_000) == 400
    assert covered_since(COVER, pinned("table-a", 12), 1_000) == 400


def test_no_claim_no_snapshot_another_table_or_an_older_version_compare_everything() -> None:
    assert covered_since(None, pinned("table-a", 7), 1_000) == 0
    assert covered_since(COVER, None, 1_000) == 0
    assert covered_since(COVER, pinned("table-b", 7), 1_000) == 0
    assert covered_since(COVER, pinned("table-a", 6), 1_000) == 0


def test_a_boundary_below_the_claim_compares_nothing_above_its_own_end() -> None:
    assert covered_since(COVER, pinned("table-a", 9), 250) == 250
