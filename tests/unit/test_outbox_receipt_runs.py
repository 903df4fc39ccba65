"""Publication receipts are stored as runs of consecutive sequences at consecutive offsets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from amends_pipeline.postgres.store import receipt_runs


def expand(runs: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    return [(s, off + (s - first)) for first, last, off in runs for s in range(first, last + 1)]


def test_named_cases() -> None:
    assert receipt_runs([]) == []
    assert receipt_runs([(1, None), (2, None)]) == []
    assert receipt_runs([(1, 100), (2, 101), (3, 102)]) == [(1, 3, 100)]
    assert receipt_runs([(1, 100), (2, 102), (3, 103)]) == [(1, 1, 100), (2, 3, 102)]  # a gap
    assert receipt_runs([(1, 100), (2, None), (3, 102)]) == [(1, 1, 100), (3, 3, 102)]
    assert receipt_runs([(4, 7), (5, 7)]) == [(4, 4, 7), (5, 5, 7)]  # the same offset twice


@given(
    st.integers(1, 1000),
    st.lists(st.one_of(st.none(), st.integers(0, 3)), max_size=60),
)
def test_runs_hold_exactly_the_offered_offsets_and_no_run_could_join_the_next(
    start: int, steps: list[int | None]
) -> None:
    off = 0
    receipts: list[tuple[int, int | None]] = []
    for i, step in enumerate(steps):
        if step is None:
            receipts.append((start + i, None))
        else:
            off += step
            receipts.append((start + i, off))
    runs = receipt_runs(receipts)
    assert expand(runs) == [(s, o) for s, o in receipts if o is not None]
    for (f1, l1, o1), (f2, _, o2) in zip(runs, runs[1:], strict=False):
        assert l1 < f2
        assert not (f2 == l1 + 1 and o2 == o1 + (f2 - f1)), "two runs that should be one"
