"""The ViewStore contract: the version rule, tombstones, frontiers and stops per output partition.

Every test runs on each view store (``TestMemory``, ``TestPostgres``, ``TestSim``).
The envelopes applied are made by the memory processing store from stated
movements (the view store is what is under test); what each application must
do is stated here by hand.
"""

from __future__ import annotations

from typing import Any

from amends_core.adapters import MemoryProcessing
from amends_core.errors import CommitUnknown
from amends_core.ledger import Config, Family
from amends_core.store.memory import MemoryStore
from tests import builders as b
from tests.contract.kinds import OnMemory, OnPostgres, OnSim

CFG = b.config()
TWO = b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 1)], partitions=2)


def outputs(objs: list[dict[str, Any]], cfg: Config = CFG, partition: int = 0) -> list[bytes]:
    """The envelopes committing ``objs`` on ``partition`` gives, in commit order."""
    store = MemoryProcessing(MemoryStore(cfg))
    tok = store.claim(partition)
    res = store.process(tok, 0, b.records(objs, partition=partition))
    return [r.envelope.to_bytes() for r in res.rows]


# balance v1 (day 1), status v1, balance v2 (withdrawn by the cancellation), balance v3 (restated)
BAL1, STATUS1, BAL2, BAL3 = outputs(
    [b.txn(qty=-1), b.txn(revision=2, kind="CANCEL", qty=0), b.txn(revision=3, qty=-2)]
)


def apply(view: Any, partition: int, recs: list[tuple[int, bytes]], end: int | None = None) -> list[str]:
    """Apply ``recs`` as the range read from the installed frontier (to ``end``, default just past them)."""
    start = view.progress(partition)[0]
    end = end if end is not None else recs[-1][0] + 1
    return [d.effect.value for d in view.apply(partition, recs, start=start, end=end)]


def balances(kit: Any) -> list[tuple[int, bool]]:
    """(version, present) of each stored balance row."""
    rows = kit.view_state().rows.values()
    return [(e.version, e.payload.present) for e in rows if e.output_id.family is Family.BALANCE]


class ViewStoreContract:
    """The ViewStore rules, asked of ``make_kit``'s view store."""

    def test_a_new_output_id_is_stored_and_the_frontier_moves_past_it(self, make_kit):
        kit = make_kit(CFG)
        assert kit.view.progress(0) == (0, None)
        assert apply(kit.view, 0, [(0, BAL1)]) == ["stored"]
        assert kit.view.progress(0) == (1, None)
        assert balances(kit) == [(1, True)]

    def test_a_higher_version_replaces_the_stored_row(self, make_kit):
        kit = make_kit(CFG)
        assert apply(kit.view, 0, [(0, BAL1), (1, BAL3)]) == ["stored", "stored"]
        assert balances(kit) == [(3, True)]

    def test_an_identical_redelivery_is_a_duplicate_and_still_advances(self, make_kit):
        kit = make_kit(CFG)
        assert apply(kit.view, 0, [(0, BAL1), (1, BAL1)]) == ["stored", "duplicate"]
        assert apply(kit.view, 0, [(2, BAL1)]) == ["duplicate"]
        assert kit.view.progress(0) == (3, None)
        assert balances(kit) == [(1, True)]

    def test_a_lower_version_is_stale_and_still_advances(self, make_kit):
        kit = make_kit(CFG)
        assert apply(kit.view, 0, [(0, BAL3), (1, BAL1)]) == ["stored", "stale"]
        assert kit.view.progress(0) == (2, None)
        assert balances(kit) == [(3, True)]

    def test_a_withdrawal_is_kept_as_a_tombstone_and_hidden_from_the_projection(self, make_kit):
        kit = make_kit(CFG)
        assert apply(kit.view, 0, [(0, BAL1), (1, STATUS1), (2, BAL2)]) == ["stored"] * 3
        assert balances(kit) == [(2, False)]
        assert kit.view_state().projections()[b.K1].balances == ()

    def test_a_stale_statement_cannot_resurrect_a_withdrawn_row(self, make_kit):
        kit = make_kit(CFG)
        assert apply(kit.view, 0, [(0, BAL2), (1, BAL1)]) == ["stored", "stale"]
        assert balances(kit) == [(2, False)]
        assert kit.view_state().projections()[b.K1].balances == ()

    def test_a_legitimate_reappearance_uses_a_higher_version(self, make_kit):
        kit = make_kit(CFG)
        apply(kit.view, 0, [(0, BAL1), (1, STATUS1), (2, BAL2), (3, BAL3)])
        assert [x.close for x in kit.view_state().projections()[b.K1].balances] == [98]

    def test_an_equal_version_with_other_content_stops_the_partition_before_that_offset(self, make_kit):
        kit = make_kit(CFG)
        effects = apply(kit.view, 0, [(0, BAL1), (1, b.forged(BAL1)), (2, STATUS1)])
        assert effects == ["stored", "protocol-error", "stopped"]
        frontier, stopped = kit.view.progress(0)
        assert frontier == 1 and stopped is not None and stopped.startswith("offset 1: ")
        assert "arrived with different content" in stopped
        assert apply(kit.view, 0, [(1, STATUS1)]) == ["stopped"]  # stays stopped
        assert kit.view.progress(0) == (1, stopped)
        assert balances(kit) == [(1, True)]

    def test_undecodable_or_misrouted_envelopes_are_protocol_errors_that_stop_the_partition(self, make_kit):
        kit = make_kit(CFG)
        assert apply(kit.view, 0, [(0, b"{}")]) == ["protocol-error"]
        frontier, stopped = kit.view.progress(0)
        assert frontier == 0 and "missing member" in stopped
        # an envelope of a key another partition owns
        routed = b.config([(b.K1, 100, 60, 1), (b.K2, 100, 60, 0)], partitions=2, namespace="routed")
        kit = make_kit(routed)
        assert apply(kit.view, 0, [(0, outputs([b.txn()], routed, 1)[0])]) == ["protocol-error"]
        assert kit.view.progress(0)[0] == 0 and kit.view.progress(0)[1] is not None
        # an envelope of another namespace
        kit = make_kit(b.config(namespace="other"))
        assert apply(kit.view, 0, [(0, BAL1), (1, b"not json")]) == ["protocol-error", "stopped"]
        assert kit.view.progress(0)[0] == 0 and kit.view_state().rows == {}

    def test_frontiers_and_stops_are_per_output_partition(self, make_kit):
        kit = make_kit(TWO)
        zero = outputs([b.txn(qty=-1)], TWO, 0)
        one = outputs([b.txn(key=b.K2, qty=-1)], TWO, 1)
        assert apply(kit.view, 0, list(enumerate(zero))) == ["stored"] * 2
        assert apply(kit.view, 1, [(0, one[0])]) == ["stored"]
        assert (kit.view.progress(0), kit.view.progress(1)) == ((2, None), (1, None))
        assert apply(kit.view, 0, [(2, b.forged(zero[0]))]) == ["protocol-error"]
        assert apply(kit.view, 1, [(1, one[1])]) == ["stored"]  # partition 1 goes on
        assert kit.view.progress(0)[0] == 2 and kit.view.progress(0)[1] is not None
        assert kit.view.progress(1) == (2, None)

    def test_the_frontier_moves_to_the_end_of_a_range_read_even_when_its_last_offsets_hold_no_record(self, 
        make_kit,
    ):
        kit = make_kit(CFG)
        # offsets 0, 3 and 4 remain of [0, 9): compaction removed the others
        assert apply(kit.view, 0, [(0, BAL1), (3, STATUS1), (4, BAL3)], end=9) == ["stored"] * 3
        assert kit.view.progress(0) == (9, None)
        assert apply(kit.view, 0, [], end=12) == []  # a range compaction emptied entirely
        assert kit.view.progress(0) == (12, None)
        assert balances(kit) == [(3, True)]

    def test_a_range_read_from_another_frontier_than_the_installed_one_is_not_applied(self, make_kit):
        kit = make_kit(CFG)
        apply(kit.view, 0, [(0, BAL1), (1, STATUS1)])
        before = kit.view_state()
        # read before the frontier moved (another applier got there first), or past it
        assert kit.view.apply(0, [(0, BAL3), (1, BAL3)], start=0, end=2) == []
        assert kit.view.apply(0, [(5, BAL3)], start=5, end=6) == []
        assert kit.view.progress(0) == (2, None)
        assert kit.view_state() == before

    def test_settling_a_lost_apply_reply_gives_the_installed_progress(self, make_kit):
        kit = make_kit(TWO)
        apply(kit.view, 0, [(0, BAL1), (1, b.forged(BAL1))])
        apply(kit.view, 1, [(0, outputs([b.txn(key=b.K2)], TWO, 1)[0])])
        stopped = kit.view.progress(0)[1]
        assert stopped is not None
        lost = CommitUnknown("the reply was lost", operation="view", partition=0)
        assert kit.view.resolve_unknown(lost) == (1, stopped)
        lost.partition = 1
        assert kit.view.resolve_unknown(lost) == (1, None)


class TestMemory(OnMemory, ViewStoreContract):
    pass


class TestPostgres(OnPostgres, ViewStoreContract):
    pass


class TestSim(OnSim, ViewStoreContract):
    pass
