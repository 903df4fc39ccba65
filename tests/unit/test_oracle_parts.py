"""One partition's oracle result travels as bytes and combines with the others into the whole.

A Dagster run (or host) per source partition computes a ``PartitionResult`` and
stores its bytes; verification decodes the parts and combines them. Generated
histories (misrouted records, unknown keys, wrong transport keys, conflicts)
must give, through bytes, exactly the oracle over everything.
"""

from __future__ import annotations

import random

import msgspec
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core.ledger import Record
from amends_core.oracle.compute import STORED, classify_partition, compute
from amends_core.oracle.partial import (
    FORMAT,
    PartError,
    combine,
    compute_partition,
    decode,
    encode,
    partition_from_rows,
)
from tests.builders import K3, record, txn
from tests.unit.test_oracle_agreement import CFG, histories
from tests.unit.test_oracle_by_partition import outcome
from tests.unit.test_oracle_columns import as_columns


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(histories())
def test_parts_decoded_from_bytes_combine_to_the_oracle_over_every_partition(
    by_partition: dict[int, list[Record]],
) -> None:
    parts = [compute_partition(CFG, p, by_partition[p]) for p in range(CFG.partitions)]
    travelled = [decode(encode(part)) for part in parts]
    assert travelled == parts
    # combined in any order
    assert outcome(combine, CFG, list(reversed(travelled))) == outcome(compute, CFG, by_partition)


def test_a_part_holds_only_its_own_partition_s_keys() -> None:
    recs: dict[int, list[Record]] = {0: [], 1: [record(txn("t1", qty=5, key=K3), 0, partition=1)]}
    part0, part1 = (compute_partition(CFG, p, recs[p]) for p in (0, 1))
    assert {k.key for k in part0.keys} == {kc.key for kc in CFG.keys if kc.partition == 0}
    assert {k.key for k in part1.keys} == {kc.key for kc in CFG.keys if kc.partition == 1}
    assert [k.key for k in part1.keys if k.balances] == [K3]


def test_a_missing_duplicate_or_unknown_partition_is_refused_by_name() -> None:
    parts = [compute_partition(CFG, p, []) for p in range(CFG.partitions)]
    with pytest.raises(PartError, match=r"missing \[1\]"):
        combine(CFG, parts[:1])
    with pytest.raises(PartError, match="two results for source partition 0"):
        combine(CFG, [parts[0], *parts])
    with pytest.raises(PartError, match="not one of the configuration's"):
        compute_partition(CFG, CFG.partitions, [])


def test_bytes_of_another_format_or_no_part_at_all_are_refused() -> None:
    good = encode(compute_partition(CFG, 0, []))
    other = msgspec.msgpack.encode([FORMAT + 1, msgspec.msgpack.decode(good)[1]])
    with pytest.raises(PartError, match=f"format {FORMAT + 1}; this version reads format {FORMAT}"):
        decode(other)
    with pytest.raises(PartError, match="not an encoded oracle partition result"):
        decode(b"\x00garbage")
    with pytest.raises(PartError, match="damaged"):
        decode(msgspec.msgpack.encode([FORMAT, {"partition": "zero"}]))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(histories(), st.integers(1, 5), st.randoms(use_true_random=False))
def test_a_part_from_kept_classified_rows_equals_the_part_from_the_records(
    by_partition: dict[int, list[Record]], chunks: int, rnd: random.Random
) -> None:
    """Rows classified in any chunks (as appended over time), read back in any order, then
    derived without decoding again, give exactly the part computed from the records."""
    for p in range(CFG.partitions):
        recs = by_partition[p]
        cuts = sorted(rnd.sample(range(1, len(recs)), min(chunks - 1, max(len(recs) - 1, 0)))) if recs else []
        pieces = [recs[a:b] for a, b in zip([0, *cuts], [*cuts, len(recs)], strict=True)]
        rows = pl.concat([classify_partition(CFG, p, as_columns(piece)) for piece in pieces])
        assert rows.columns == STORED and len(rows) == len(recs)
        rows = rows.sample(fraction=1.0, shuffle=True, seed=rnd.randrange(1 << 30))
        assert partition_from_rows(CFG, p, rows) == compute_partition(CFG, p, recs)
