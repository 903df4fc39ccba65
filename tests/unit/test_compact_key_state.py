"""A compact key state decides exactly like a full one.

A compact state (``KeyState.compact``, what the PostgreSQL worker keeps in memory)
holds per identity only the highest revision's candidates and no delivery
places; an assertion at a dropped revision raises ``EvidenceNotHeld`` and the
store restores that identity's lower revisions from its durable evidence. Here
the full state plays the durable evidence: both states fold the same generated
histories in lockstep and must produce the same delta for every record.
"""

from __future__ import annotations

import random

import pytest

from amends_core import fold
from amends_core.ledger import ConflictRef, Coordinates, Record
from tests.builders import K1, config, day, records, txn


def _history(seed: int, length: int) -> list[Record]:
    """Few identities, revisions 1..4 in any order, many duplicates and stale arrivals."""
    rng = random.Random(seed)
    made: list[dict[str, object]] = []
    for _ in range(length):
        if made and rng.random() < 0.3:
            made.append(dict(rng.choice(made)))  # a redelivery, possibly long after
            continue
        kind = rng.choice(["NEW", "AMEND", "AMEND", "CANCEL"])
        made.append(
            txn(
                f"T{rng.randrange(4)}",
                rng.randint(1, 4),
                kind,
                qty=0 if kind == "CANCEL" else rng.choice([-7, -3, 5]),
                valid=day(rng.randint(1, 6)),
            )
        )
    return records(made)


def _copy_lower(ident: fold.Identity, below: int) -> dict[int, list[fold.Candidate]]:
    """What a store reads back from its evidence: the candidates below ``below``."""
    return {
        rev: [fold.Candidate(c.txn, list(c.sources)) for c in group]
        for rev, group in ident.revisions.items()
        if rev < below
    }


@pytest.mark.parametrize("seed", range(40))
def test_compact_and_full_states_make_the_same_decisions(seed: int) -> None:
    cfg = config([(K1, 100, 60, 0)])
    kc = cfg.key_config(K1)
    assert kc is not None
    full = fold.new_key_state(kc)
    compact = fold.new_key_state(kc)
    compact.compact = True
    restored = 0
    for r in _history(seed, 60):
        t = fold.validate(cfg, r)
        assert isinstance(t, fold.Transaction)
        want = fold.apply(full, t, r.coords)
        try:
            got = fold.apply(compact, t, r.coords)
        except fold.EvidenceNotHeld as e:
            assert (e.key, e.txn_id, e.revision) == (K1, t.txn_id, t.revision)
            compact.identities[t.txn_id].restore(_copy_lower(full.identities[t.txn_id], e.below))
            restored += 1
            got = fold.apply(compact, t, r.coords)
        assert got == want
        full.install(want)
        compact.install(got)
        assert compact.projection() == full.projection()
        assert compact.conflicts == full.conflicts
    assert restored > 0  # the history did reach dropped revisions
    for tid, ident in compact.identities.items():
        top = ident.top()
        assert ident.revisions.keys() == {ident.highest}
        assert [c.txn for c in top] == [c.txn for c in full.identities[tid].top()]
        assert all(c.sources == [] for c in top)


def test_a_dropped_revision_is_announced_not_guessed() -> None:
    cfg = config([(K1, 100, 60, 0)])
    kc = cfg.key_config(K1)
    assert kc is not None
    st = fold.new_key_state(kc)
    st.compact = True
    recs = records([
        txn("A", 1, qty=-5, valid=day(1)),
        txn("A", 2, "AMEND", qty=-6, valid=day(2)),
        txn("A", 1, qty=-9, valid=day(1)),  # conflicts with the dropped revision 1
    ])
    for r in recs[:2]:
        t = fold.validate(cfg, r)
        assert isinstance(t, fold.Transaction)
        st.install(fold.apply(st, t, r.coords))
    ident = st.identities["A"]
    assert ident.dropped_below == 2 and ident.candidates(1) is None
    stale = fold.validate(cfg, recs[2])
    assert isinstance(stale, fold.Transaction)
    with pytest.raises(fold.EvidenceNotHeld) as caught:
        fold.apply(st, stale, recs[2].coords)
    assert caught.value.below == 2
    first = fold.validate(cfg, recs[0])
    assert isinstance(first, fold.Transaction)
    ident.restore({1: [fold.Candidate(first, Coordinates(recs[0].coords.source, 0, 0))]})
    d = fold.apply(st, stale, recs[2].coords)
    assert d.new_conflict == ConflictRef("A", 1) and d.duplicate_of is None
    st.install(d)
    assert st.identities["A"].dropped_below == 2 and ConflictRef("A", 1) in st.conflicts
