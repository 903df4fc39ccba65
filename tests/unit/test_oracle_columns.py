"""The oracle over ``Columns`` (how verification reads Kafka) equals the oracle over ``Record`` values.

A partition given as columns skips building a Python object per record; every
result (projections, rejections with the very records, conflicts, reason
counts, a close out of range) must be the one the same records give as values.
"""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core.ledger import CloseOutOfRange, Coordinates, Record
from amends_core.oracle import Columns, OracleInputError, compute
from amends_core.oracle.partial import compute_by_partition
from tests.unit.test_oracle_agreement import CFG, histories


def as_columns(recs: list[Record]) -> Columns:
    """Built here field by field, not through the oracle's own conversion."""
    return Columns(
        pl.Series([r.coords.offset for r in recs], dtype=pl.Int64),
        pl.Series([r.key for r in recs], dtype=pl.Binary),
        pl.Series([r.value for r in recs], dtype=pl.Binary),
        pl.Series([r.reserved_header for r in recs], dtype=pl.Boolean),
    )


def outcome(by_partition: dict[int, object]) -> object:
    try:
        r = compute(CFG, by_partition)  # type: ignore[arg-type]
    except CloseOutOfRange as e:
        return ("CloseOutOfRange", e.key, e.day)
    return (r.result, r.rejections, dict(r.reason_counts))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(histories(), st.data())
def test_columns_and_records_give_the_same_result(by_partition: dict[int, list[Record]], data: st.DataObject) -> None:
    # some records also carry the reserved header: the flag must travel with its row
    flagged = {
        p: [
            dataclasses.replace(r, reserved_header=True) if data.draw(st.integers(0, 9), label="flag") == 0 else r
            for r in recs
        ]
        for p, recs in by_partition.items()
    }
    columns = {p: as_columns(recs) for p, recs in flagged.items()}
    by_columns = outcome(columns)  # type: ignore[arg-type]
    assert by_columns == outcome(flagged)  # type: ignore[arg-type]
    if isinstance(by_columns, tuple) and by_columns[0] != "CloseOutOfRange":
        # both routes lay records out as columns: name each rejection's record against the input itself
        given = {r.coords: r for recs in flagged.values() for r in recs}
        assert all(given[rej.record.coords] == rej.record for rej in by_columns[1])
    mixed = {p: (columns[p] if p % 2 else recs) for p, recs in flagged.items()}
    assert outcome(mixed) == outcome(flagged)  # type: ignore[arg-type]


def test_rejected_rows_come_back_as_the_records_they_were() -> None:
    src = CFG.source_incarnation
    recs = [
        Record(b"", None, Coordinates(src, 0, 3)),  # empty value, no key
        Record(b"\xff\xfe not utf-8", b"\x80", Coordinates(src, 0, 7)),  # invalid UTF-8 in both
        Record(b"{}", b'["A","B"]', Coordinates(src, 0, 9), True),  # reserved header
    ]
    result = compute(CFG, {0: as_columns(recs), 1: []})
    assert [r.record for r in result.rejections] == recs
    assert result.rejections == compute(CFG, {0: recs, 1: []}).rejections


def test_one_partition_at_a_time_accepts_columns() -> None:
    src = CFG.source_incarnation
    recs = {0: [Record(b"{}", None, Coordinates(src, 0, 0))], 1: [Record(b"[]", None, Coordinates(src, 1, 5))]}
    by_columns = compute_by_partition(CFG, lambda p: as_columns(recs[p]))
    assert by_columns == compute(CFG, recs)


def test_offsets_given_as_columns_are_checked_like_records() -> None:
    def cols(offsets: list[int]) -> Columns:
        return Columns.of(offsets, [None] * len(offsets), [b"{}"] * len(offsets))

    with pytest.raises(OracleInputError, match="offsets of partition 1 are not strictly increasing: 4 is followed by 4"):
        compute(CFG, {1: cols([2, 4, 4])})
    with pytest.raises(OracleInputError, match="partition 0 has a negative offset"):
        compute(CFG, {0: cols([-1, 0])})
    with pytest.raises(OracleInputError, match="above the int64 range"):
        cols([2**63])
    with pytest.raises(OracleInputError, match="outside 0..1"):
        compute(CFG, {2: cols([0])})


def test_malformed_columns_are_refused_with_the_column_named() -> None:
    good = Columns.of([0, 1], [None, b"k"], [b"a", b"b"], [False, True])
    assert good.reserved.to_list() == [False, True]
    with pytest.raises(OracleInputError, match="'offset' must be a Int64 series, not String"):
        Columns(pl.Series(["0"]), good.key[:1], good.value[:1], good.reserved[:1])
    with pytest.raises(OracleInputError, match="'value' must be a Binary series, not list"):
        Columns(good.offset, good.key, [b"a", b"b"], good.reserved)  # type: ignore[arg-type]
    with pytest.raises(OracleInputError, match=r"differ in length: \[1, 2\]"):
        Columns(good.offset, good.key, good.value[:1], good.reserved)
    with pytest.raises(OracleInputError, match="'value' holds 1 nulls"):
        Columns(good.offset, good.key, pl.Series([b"a", None], dtype=pl.Binary), good.reserved)
