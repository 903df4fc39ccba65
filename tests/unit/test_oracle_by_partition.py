"""The oracle computed one source partition at a time equals the oracle over everything.

``verify`` reads and recomputes one partition at a time so that its memory holds
one partition's history; that is only sound if no rule of the oracle looks
across partitions. Generated histories include misrouted records, unknown keys,
wrong transport keys and conflicts.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from amends_core.ledger import CloseOutOfRange, Record
from amends_core.oracle.compute import compute
from amends_core.oracle.partial import compute_by_partition
from tests.unit.test_oracle_agreement import CFG, histories


def outcome(fn: object, *args: object) -> object:
    try:
        r = fn(*args)  # type: ignore[operator]
    except CloseOutOfRange as e:
        return ("CloseOutOfRange", e.key)
    return (r.result, r.rejections, dict(r.reason_counts))


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(histories())
def test_the_oracle_one_partition_at_a_time_equals_the_oracle_over_all_partitions(
    by_partition: dict[int, list[Record]],
) -> None:
    reads: list[int] = []

    def read(p: int) -> list[Record]:
        reads.append(p)
        return by_partition[p]

    assert outcome(compute_by_partition, CFG, read) == outcome(compute, CFG, by_partition)
    assert reads == list(range(CFG.partitions))  # each partition read once, in order


def test_keys_of_other_partitions_are_untouched_in_a_partition_s_own_result() -> None:
    # a history only on partition 1 leaves partition 0's keys exactly as the full oracle has them
    from tests.builders import K3, record, txn

    recs: dict[int, list[Record]] = {0: [], 1: [record(txn("t1", qty=5, key=K3), 0, partition=1)]}
    merged = compute_by_partition(CFG, lambda p: recs[p])
    assert merged.result == compute(CFG, recs).result
    touched = [k.key for k in merged.result.keys if k.balances]
    assert touched == [K3]
