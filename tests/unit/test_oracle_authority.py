"""The oracle's authority step against a plain Python reading of the rules.

``_authority`` finds revision groups and identities as runs of sorted rows;
these cases put rivals, repeats and shared names where adjacent-row
comparisons could go wrong.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

import polars as pl
import pytest

oracle_compute = importlib.import_module("amends_core.oracle.compute")

Row = tuple[int, str, int, str, int, int, int]
"""kid, txn_id, revision, kind, valid_s, valid_nanos, qty"""


def expected(rows: list[Row]) -> tuple[set[Any], set[Any], list[Any]]:
    groups: dict[tuple[int, str], dict[int, set[Row]]] = {}
    for r in rows:
        groups.setdefault((r[0], r[1]), {}).setdefault(r[2], set()).add(r)
    conflicts = {(k, t, rev) for (k, t), revs in groups.items() for rev, c in revs.items() if len(c) > 1}
    blocked = {(k, t, max(revs)) for (k, t), revs in groups.items() if len(revs[max(revs)]) > 1}
    blocked_kids = {k for k, _, _ in blocked}
    active = sorted(
        (k, next(iter(revs[max(revs)]))[4] // 86_400, next(iter(revs[max(revs)]))[6])
        for (k, _), revs in groups.items()
        if k not in blocked_kids and next(iter(revs[max(revs)]))[3] != "CANCEL"
    )
    return conflicts, blocked, active


def check(rows: list[Row]) -> None:
    frame = pl.DataFrame(
        rows,
        schema=["kid", "txn_id", "revision", "kind", "valid_s", "valid_nanos", "qty"],
        orient="row",
    )
    conflicts, blocked, active = oracle_compute._authority(frame)
    want = expected(rows)
    assert set(conflicts.rows()) == want[0]
    assert len(conflicts) == len(want[0])
    assert set(blocked.rows()) == want[1]
    assert len(blocked) == len(want[1])
    assert sorted(active.collect().rows()) == want[2]


def test_border_cases() -> None:
    day = 86_400
    rows: list[Row] = [
        # same identity name under two keys: separate identities
        (0, "A", 1, "NEW", day, 0, 5),
        (1, "A", 2, "NEW", day, 0, 7),
        # an exact repeat is no rival
        (0, "B", 1, "NEW", day, 0, 3),
        (0, "B", 1, "NEW", day, 0, 3),
        # rivals below the highest revision: a conflict, not blocking
        (0, "C", 1, "NEW", day, 0, 1),
        (0, "C", 1, "NEW", day, 0, 2),
        (0, "C", 2, "AMEND", 2 * day, 0, 4),
        # rivals that differ only in nanoseconds, at the highest revision: blocks key 2
        (2, "D", 1, "NEW", day, 0, 1),
        (2, "D", 3, "AMEND", day, 0, 1),
        (2, "D", 3, "AMEND", day, 1, 1),
        (2, "E", 1, "NEW", day, 0, 9),
        # the rival repeated after a repeat of the first candidate
        (3, "F", 4, "AMEND", day, 0, 1),
        (3, "F", 4, "AMEND", day, 0, 1),
        (3, "F", 4, "CANCEL", day, 0, 0),
        # a cancellation as authority, one identity whose name sorts next to another's
        (4, "G", 1, "NEW", day, 0, 8),
        (4, "G", 2, "CANCEL", day, 0, 0),
        (4, "G0", 1, "NEW", 3 * day, 0, 6),
    ]
    check(rows)
    rng = random.Random(5)
    for _ in range(5):
        rng.shuffle(rows)
        check(rows)


def test_random_histories() -> None:
    random_histories(random.Random(11))


def test_random_histories_sorted_by_identity_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oracle_compute, "_HASH_SORT_ROWS", 0)
    test_border_cases()
    random_histories(random.Random(11))


@pytest.mark.parametrize(
    "colliding",
    [
        pytest.param(lambda: pl.lit(0, dtype=pl.UInt64), id="every-identity-one-hash"),
        pytest.param(lambda: pl.col("kid").hash(), id="one-hash-per-key"),
        pytest.param(lambda: pl.col("txn_id").str.len_bytes().cast(pl.UInt64), id="hash-by-name-length"),
    ],
)
def test_identities_with_equal_hashes_are_kept_apart(monkeypatch: pytest.MonkeyPatch, colliding: Any) -> None:
    """Rows are ordered by a hash of the identity; distinct identities sharing a hash
    must still come out as separate identities (here every hash collides)."""
    monkeypatch.setattr(oracle_compute, "_HASH_SORT_ROWS", 0)
    monkeypatch.setattr(oracle_compute, "_identity_hash", colliding)
    test_border_cases()
    random_histories(random.Random(12))


def random_histories(rng: random.Random) -> None:
    for _ in range(30):
        rows: list[Row] = []
        for _ in range(rng.randrange(1, 60)):
            kind = rng.choice(["NEW", "AMEND", "CANCEL"])
            rows.append(
                (
                    rng.randrange(4),
                    rng.choice(["a", "b", "c", "ab"]),
                    rng.randrange(1, 4),
                    kind,
                    rng.randrange(3) * 86_400 + rng.randrange(2),
                    rng.randrange(2) * rng.randrange(2),
                    0 if kind == "CANCEL" else rng.randrange(-2, 3),
                )
            )
        check(rows)
