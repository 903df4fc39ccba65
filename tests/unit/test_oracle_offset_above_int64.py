"""The oracle refuses a source offset above signed 64-bit with OracleInputError (issue 14).

Kafka offsets are int64. The oracle builds an Int64 column of the offsets; an
offset one above INT64_MAX used to escape as a TypeError from Polars (an
internal error) instead of the input error every other bad offset gets.
`amends compute` refuses such offsets earlier, while reading the file, so
this calls the oracle directly, as verification and the Dagster checks do.
"""

from __future__ import annotations

import pytest

from amends_core.ledger import INT64_MAX
from amends_core.oracle import OracleInputError, compute
from tests.builders import K1, config, record, txn

CFG = config([(K1, 100, 60, 0)])


def test_an_offset_above_int64_is_an_oracle_input_error_naming_partition_and_offset() -> None:
    recs = [record(txn("A"), INT64_MAX - 1), record(txn("B"), INT64_MAX + 1)]
    with pytest.raises(OracleInputError) as caught:
        compute(CFG, {0: recs})
    assert str(caught.value) == f"partition 0 has offset {2**63}, above the int64 range"


def test_the_largest_int64_offset_is_accepted() -> None:
    result = compute(CFG, {0: [record(txn("A", qty=-5), 0), record(txn("B", qty=-7), INT64_MAX)]})
    assert result.rejections == ()
    (key,) = result.result.keys
    assert [b.close for b in key.balances] == [88]  # 100 - 5 - 7 on the builders' one day
