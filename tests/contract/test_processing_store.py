"""The ProcessingStore and AheadStore contract: ownership, frontier, fenced batches, replay.

Written once against the ports; every test runs on each processing store
(``TestMemory``, ``TestPostgres``, ``TestSim``; see ``kits``). Nothing here knows
which store it has: envelopes, frontiers and state are read through the port
or the kit's store-independent ``state``.
"""

from __future__ import annotations

from typing import Any

import pytest

from amends_core import timefmt, wire
from amends_core.errors import (
    BatchAborted,
    CommitUnknown,
    FenceError,
    FrontierMismatch,
    ReplayMismatch,
    SourceMismatch,
)
from amends_core.ledger import (
    INT64_MAX,
    INT64_MIN,
    CloseOutOfRange,
    Config,
    KeyConfig,
    Record,
    RejectReason,
    StockKey,
)
from amends_core.ports import Token
from amends_pipeline.postgres.batch import COPY_MIN_ROWS
from tests import builders as b
from tests.contract.kinds import OnMemory, OnPostgres, OnSim
from tests.contract.kits import envelope_bytes


def envs(raw: list[bytes]) -> list[tuple[str, str | None, int, int]]:
    """(type, day, version, cause offset) of envelope bytes."""
    out = []
    for r in raw:
        e = wire.decode_envelope(r)
        assert not isinstance(e, wire.DecodeError), e
        day = None if e.output_id.day is None else timefmt.format_day(e.output_id.day)
        out.append((e.type.value, day, e.version, e.cause.offset))
    return out


def batch(kit: Any, token: Token, records: list[Record], until: int | None = None) -> list[bytes]:
    """Process ``records`` from the installed frontier; the envelopes the batch committed."""
    res = kit.store.process(token, kit.store.frontier(token.partition), records, until)
    return [envelope_bytes(r.envelope) for r in res.rows]


AHEAD_CFG = b.config([(b.K1, 10**6, 999_900, 0), (b.K2, 10**6, 999_950, 0)])


def without_namespace(kit: Any) -> tuple[Any, ...]:
    """Everything ``state`` shows but the namespace's own name."""
    st = kit.state()
    name = f'"namespace":"{kit.cfg.namespace}"'.encode()
    outbox = {p: [raw.replace(name, b"") for raw in rows] for p, rows in st.outbox.items()}
    outputs = {
        (oid.family, oid.key, oid.day): (e.version, e.type, e.payload, e.cause)
        for oid, e in st.outputs.items()
    }
    return st.partitions, outbox, outputs, st.rejections, st.conflicts, st.keys


class ProcessingStoreContract:
    """The ProcessingStore and AheadStore rules, asked of ``make_kit``'s stores."""

    # ---------------------------------------------------------------- ownership

    def test_a_claim_installs_the_next_epoch_without_moving_the_frontier(self, make_kit):
        kit = make_kit(b.config())
        first = kit.store.claim(0)
        batch(kit, first, b.records([b.txn("A")]))
        second = kit.store.claim(0)
        assert (first.epoch, second.epoch) == (1, 2)
        assert kit.store.frontier(0) == 1

    def test_a_replaced_owner_cannot_commit_after_the_claim(self, make_kit):
        kit = make_kit(b.config())
        old = kit.store.claim(0)
        new = kit.store.claim(0)
        with pytest.raises(FenceError, match="replaced"):
            kit.store.process(old, 0, b.records([b.txn("A"), b.txn("B")]))
        st = kit.state()
        assert kit.store.frontier(0) == 0
        assert st.outbox[0] == [] and st.outputs == {} and st.rejections == []
        assert kit.store.process(new, 0, b.records([b.txn("A"), b.txn("B")])).frontier == 2

    def test_a_token_of_another_configuration_is_fenced(self, make_kit):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        forged = Token(tok.namespace, "0" * 64, tok.partition, tok.epoch)
        with pytest.raises(FenceError):
            kit.store.process(forged, 0, b.records([b.txn("A")]))
        other = b.config([(b.K1, 100, 61, 0)])
        with pytest.raises(FenceError):
            kit.store.process(Token(tok.namespace, other.digest(), 0, tok.epoch), 0, b.records([b.txn("A")]))
        assert kit.store.frontier(0) == 0

    def test_each_new_nonce_is_one_the_store_never_handed_out_before(self, make_kit):
        kit = make_kit(b.config())
        nonces = [kit.store.new_nonce() for _ in range(50)]
        assert len(set(nonces)) == 50 and all(nonces)

    def test_settling_a_lost_claim_adopts_the_installed_epoch_only_under_the_claimants_own_nonce(self, make_kit):
        kit = make_kit(b.config())
        s = kit.store
        s.claim(0, "n-1")
        s.claim(0, "mine")  # landed, but suppose the claimant never heard back
        lost = CommitUnknown("the reply was lost", operation="claim", partition=0)
        assert s.settle_claim(0, "mine", lost) == Token(kit.cfg.namespace, kit.cfg.digest(), 0, 2)
        other = s.claim(0, "other")  # another live worker claims meanwhile
        assert s.settle_claim(0, "mine", lost) is None  # never share the other worker's epoch
        again = s.claim(0, "mine-2")  # claiming again fences the other worker instead
        assert again.epoch == 4 and s.settle_claim(0, "mine-2") == again
        with pytest.raises(FenceError, match="replaced"):
            s.process(other, 0, b.records([b.txn("A")]))
        assert s.process(again, 0, b.records([b.txn("A")])).frontier == 1

    def test_a_claim_that_never_landed_or_named_no_nonce_is_never_adopted(self, make_kit):
        kit = make_kit(b.config())
        s = kit.store
        assert s.settle_claim(0, "mine") is None  # epoch 0: nobody claimed it
        s.claim(0, "earlier")
        assert s.settle_claim(0, "mine") is None  # the previous claim's epoch 1 is not this one
        s.claim(0)
        assert s.settle_claim(0, "anything") is None
        with pytest.raises(ValueError, match="nonce"):
            s.settle_claim(0, "")

    def test_claimant_nonces_are_per_partition(self, make_kit):
        cfg = b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 1)], partitions=2)
        kit = make_kit(cfg)
        kit.store.claim(0, "mine")
        kit.store.claim(1, "other")
        assert kit.store.settle_claim(0, "mine") == Token(cfg.namespace, cfg.digest(), 0, 1)
        assert kit.store.settle_claim(1, "mine") is None

    # ---------------------------------------------------------------- frontier and coordinates

    def test_processing_from_any_frontier_but_the_installed_one_is_refused(self, make_kit):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        batch(kit, tok, b.records([b.txn("A"), b.txn("B")]))
        for wrong in (1, 3):
            with pytest.raises(FrontierMismatch):
                kit.store.process(tok, wrong, b.records([b.txn("C")], start=3))
        assert kit.store.frontier(0) == 2

    def test_records_of_another_source_or_partition_or_below_the_frontier_are_refused(self, make_kit):
        kit = make_kit(b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 1)], partitions=2))
        tok = kit.store.claim(0)
        batch(kit, tok, b.records([b.txn("A"), b.txn("B")]))
        for wrong in (
            b.record(b.txn("C"), 1),  # below the frontier
            b.record(b.txn("C"), 5, source="other-source"),
            b.record(b.txn("C", key=b.K2), 5, partition=1),
        ):
            with pytest.raises(SourceMismatch):
                kit.store.process(tok, 2, [wrong])
        assert kit.store.frontier(0) == 2

    def test_offset_gaps_leave_the_frontier_just_after_the_last_record(self, make_kit):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        assert kit.store.process(tok, 0, [b.record(b.txn("A"), 3), b.record(b.txn("B"), 10)]).frontier == 11
        assert kit.store.frontier(0) == 11

    def test_a_range_end_moves_the_frontier_past_offsets_that_delivered_nothing_and_is_fenced(self, make_kit):
        kit = make_kit(b.config())
        old = kit.store.claim(0)
        assert kit.store.process(old, 0, [], until=3).frontier == 3
        new = kit.store.claim(0)
        with pytest.raises(FenceError, match="replaced"):
            kit.store.process(old, 3, [], until=7)
        with pytest.raises(SourceMismatch, match="below record offset|back"):
            kit.store.process(new, 3, b.records([b.txn("A")], start=3), until=3)
        assert kit.store.frontier(0) == 3
        assert kit.store.process(new, 3, b.records([b.txn("A")], start=4), until=9).frontier == 9

    def test_an_empty_batch_checks_the_fence_and_changes_nothing(self, make_kit):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        res = kit.store.process(tok, 0, [])
        assert (res.frontier, res.rows, res.rejections, res.accepted) == (0, (), (), 0)
        kit.store.claim(0)
        with pytest.raises(FenceError):
            kit.store.process(tok, 0, [])
        assert kit.state().partitions[0] == (2, 0, 0, 0)

    def test_a_batch_with_a_failing_record_commits_nothing_and_names_the_record(self, make_kit):
        kit = make_kit(b.config([(b.K1, INT64_MAX - 5, 0, 0)]))
        tok = kit.store.claim(0)
        recs = b.records([
            b.txn("A", qty=1, valid=b.day(1)),
            b.txn("B", qty=9, valid=b.day(2)),  # the close leaves int64
            b.txn("C", qty=1, valid=b.day(3)),
        ])
        with pytest.raises(BatchAborted) as caught:
            kit.store.process(tok, 0, recs)
        assert (caught.value.partition, caught.value.offset) == (0, 1)
        assert isinstance(caught.value.__cause__, CloseOutOfRange)
        st = kit.state()
        assert kit.store.frontier(0) == 0
        assert (st.outbox[0], st.outputs, st.rejections, st.keys[b.K1].closes) == ([], {}, [], [])
        # the records before the failing one commit on their own: the store is not poisoned
        assert kit.store.process(tok, 0, recs[:1]).frontier == 1
        assert kit.state().keys[b.K1].closes == [INT64_MAX - 4]

    def test_a_lost_batch_reply_settles_as_committed_exactly_when_the_frontier_is_the_batchs_end(self, make_kit):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        batch(kit, tok, b.records([b.txn("A"), b.txn("B")]))

        def lost(before: int, after: int) -> CommitUnknown:
            return CommitUnknown("lost", operation="batch", partition=0, before=before, after=after)

        assert kit.store.resolve_unknown(lost(0, 2)) is True
        assert kit.store.resolve_unknown(lost(2, 5)) is False
        with pytest.raises(Exception, match="another owner moved it"):
            kit.store.resolve_unknown(lost(4, 5))
        with pytest.raises(Exception, match="not a processing commit"):
            kit.store.resolve_unknown(CommitUnknown("lost", operation="claim", partition=0))
        assert kit.store.frontier(0) == 2

    # ---------------------------------------------------------------- authority

    def test_amendment_replaces_the_whole_value_and_repairs_from_the_earliest_affected_day(self, make_kit):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        first = batch(kit, tok, b.records([
            b.txn("A", qty=-10, valid=b.day(2)),
            b.txn("B", qty=-10, valid=b.day(5)),
        ]))
        assert envs(first) == [
            ("BalanceStated", "2026-01-02", 1, 0),
            ("KeyStatusStated", None, 1, 0),
            ("BalanceStated", "2026-01-05", 1, 1),
        ]
        # Moving B from day 5 to day 3 repairs from day 3: day 3 appears, day 5 is withdrawn.
        moved = batch(kit, tok, b.records([b.txn("B", 2, "AMEND", qty=-10, valid=b.day(3))], start=2))
        assert envs(moved) == [
            ("BalanceStated", "2026-01-03", 1, 2),
            ("BalanceRetracted", "2026-01-05", 2, 2),
        ]

    def test_cancellation_removes_the_contribution_and_a_late_lower_revision_cannot_resurrect_it(self, 
        make_kit,
    ):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        batch(kit, tok, b.records([b.txn("A", qty=-10, valid=b.day(2))]))
        cancelled = batch(kit, tok, b.records([b.txn("A", 3, "CANCEL", qty=0, valid=b.day(9))], start=1))
        assert envs(cancelled) == [("BalanceRetracted", "2026-01-02", 2, 1)]
        late = batch(kit, tok, b.records([b.txn("A", 2, "AMEND", qty=-99, valid=b.day(2))], start=2))
        assert late == []
        assert kit.state().keys[b.K1].active == {}

    def test_distinct_candidates_at_the_highest_revision_block_the_key_until_resolved(self, make_kit):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        batch(kit, tok, b.records([
            b.txn("A", 1, qty=-10, valid=b.day(2)),
            b.txn("A", 2, "AMEND", qty=-20, valid=b.day(2)),
            b.txn("A", 2, "AMEND", qty=-30, valid=b.day(2)),  # conflict at revision 2
            b.txn("C", 1, qty=-5, valid=b.day(4)),  # evidence kept, values frozen
        ]))
        st = kit.state()
        assert [(c.txn_id, c.revision) for c in st.conflicts] == [("A", 2)]
        status = [e for e in st.outputs.values() if e.output_id.family.value == "key-status"]
        assert status[0].payload.status.value == "BLOCKED"
        resolved = batch(kit, tok, b.records([b.txn("A", 3, "AMEND", qty=-40, valid=b.day(2))], start=4))
        # The whole key refolds (C's day 4 appears and now crosses 60), READY last.
        assert envs(resolved) == [
            ("AlertRaised", "2026-01-04", 1, 4),
            ("BalanceStated", "2026-01-02", 3, 4),
            ("BalanceStated", "2026-01-04", 1, 4),
            ("KeyStatusStated", None, 3, 4),
        ]
        assert [(c.txn_id, c.revision) for c in kit.state().conflicts] == [("A", 2)]  # historical

    def test_canonical_duplicate_at_another_offset_adds_evidence_but_no_envelope(self, make_kit):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        batch(kit, tok, b.records([b.txn("A", qty=-10)]))
        dup = batch(kit, tok, b.records([b.txn("A", qty=-10, source_time="2027-01-01T00:00:00Z")], 0, 1))
        assert dup == []
        cand = kit.state().keys[b.K1].identities["A"].revisions[1]
        assert len(cand) == 1
        assert [c.offset for c in cand[0].sources] == [0, 1]

    def test_stale_lower_revision_emits_nothing_and_changes_no_projection(self, make_kit):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        batch(kit, tok, b.records([b.txn("A", 5, "AMEND", qty=-10)]))
        before = kit.state().keys[b.K1].projection()
        assert batch(kit, tok, b.records([b.txn("A", 4, "AMEND", qty=-70)], start=1)) == []
        assert kit.state().keys[b.K1].projection() == before

    # ---------------------------------------------------------------- quarantine

    def test_every_rejection_reason_quarantines_the_raw_record_and_advances_the_frontier(self, make_kit):
        kit = make_kit(b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 1)], partitions=2))
        tok = kit.store.claim(0)
        good = b.txn("A")
        bad = [
            (b.record(b"\xff{not json", 0, key=b.K1.transport_key()), RejectReason.MALFORMED),
            (b.record(b.txn(""), 1), RejectReason.IDENTITY),
            (b.record(b.txn(revision=0), 2), RejectReason.REVISION),
            (b.record(b.txn(kind="UPSERT"), 3), RejectReason.KIND),
            (b.record(b.txn(kind="CANCEL", qty=3), 4), RejectReason.CANCEL_QUANTITY),
            (b.record(b.txn(valid="2025-12-31T23:59:59Z"), 5), RejectReason.VALID_TIME),
            (b.record(b.txn(key=StockKey("NOPE", "X")), 6), RejectReason.UNKNOWN_KEY),
            (b.record(good, 7, key=b"\xfe\x00raw"), RejectReason.KEY_MISMATCH),
            (b.record(good, 8, key=None), RejectReason.KEY_MISMATCH),
            (b.record(b.txn(key=b.K2), 10), RejectReason.ROUTING),  # gap at 9
        ]
        res = kit.store.process(tok, 0, [r for r, _ in bad])
        assert (res.rows, res.accepted, res.frontier) == ((), 0, 11)
        assert [(r.record, r.reason) for r in res.rejections] == [(r, why) for r, why in bad]
        assert kit.store.frontier(0) == 11
        st = kit.state()
        assert [(r.record, r.reason) for r, _ in st.rejections] == [(r, why) for r, why in bad]
        assert all(detail for _, detail in st.rejections)
        assert st.outbox[0] == []

    # ---------------------------------------------------------------- arithmetic and names

    def test_day_totals_beyond_int64_with_a_representable_close_are_exact(self, make_kit):
        kit = make_kit(b.config([(b.K1, INT64_MIN, 0, 0)]))
        tok = kit.store.claim(0)
        batch(kit, tok, b.records([b.txn("A", qty=INT64_MAX), b.txn("B", qty=6)]))
        st = kit.state().keys[b.K1]
        assert st.totals == [INT64_MAX + 6]
        assert st.closes == [5]

    def test_valid_times_in_years_1_and_9999_round_trip(self, make_kit):
        cfg = Config(
            1, "ns", b.SOURCE, 1, timefmt.parse_rfc3339("0001-01-01T00:00:00Z"),
            (KeyConfig(b.K1, 0, 1, 0),),
        ).validate()
        kit = make_kit(cfg)
        tok = kit.store.claim(0)
        out = batch(kit, tok, b.records([
            b.txn("A", qty=1, valid="0001-01-01T00:00:00Z", source_time="0000-12-31T23:00:00-02:00"),
            b.txn("B", qty=-2, valid="9999-12-31T23:59:59.999999999Z"),
        ]))
        assert envs(out)[0][1] == "0001-01-01" and envs(out)[-1][1] == "9999-12-31"
        ident = kit.state().keys[b.K1].identities
        assert ident["B"].revisions[1][0].txn.valid_ns == timefmt.parse_rfc3339(
            "9999-12-31T23:59:59.999999999Z"
        )

    # ---------------------------------------------------------------- replay

    def test_replay_of_a_consumed_interval_checks_evidence_and_claims_a_new_epoch(self, make_kit):
        kit = make_kit(b.config())
        tok = kit.store.claim(0)
        recs = b.records([b.txn("A", qty=-50), b.txn(""), b.txn("A", 2, "AMEND", qty=-30)])
        recs.append(b.record(b"bad", 3, key=None))
        batch(kit, tok, recs)
        before = kit.state()
        new = kit.replay(0, recs)
        assert new.epoch == tok.epoch + 1
        after = kit.state()
        assert (after.outbox, after.outputs, after.keys) == (before.outbox, before.outputs, before.keys)
        assert after.partitions[0][1:] == before.partitions[0][1:] == (4, 5, 0)
        for wrong in (
            b.records([b.txn("Z")], start=1),  # not what offset 1 held
            b.records([b.txn("A", qty=-51)]),  # other evidence at offset 0
            b.records([b.txn("A")], start=4),  # not consumed yet
        ):
            with pytest.raises(ReplayMismatch):
                kit.replay(0, wrong)
        assert kit.store.claim(0).epoch == new.epoch + 1  # the failed replays claimed nothing

    # ---------------------------------------------------------------- folding ahead

    @pytest.mark.parametrize("size", [7, COPY_MIN_ROWS + 40])
    def test_a_chain_of_batches_folded_ahead_installs_what_one_batch_at_a_time_installs(self, make_kit, size):
        recs = b.records(b.mixed_history(4 * size))
        starts = [0, size, 2 * size, 3 * size]
        serial = make_kit(AHEAD_CFG.with_namespace("serial"))
        tok = serial.store.claim(0)
        for lo in starts:
            serial.store.process(tok, lo, recs[lo:lo + size])
        ahead = make_kit(AHEAD_CFG.with_namespace("ahead"))
        tok = ahead.store.claim(0)
        flight = None
        for lo in starts:
            flight = ahead.store.process_ahead(tok, lo, recs[lo:lo + size], after=flight)
        assert flight is not None and flight.committed()
        assert flight.result().frontier == 4 * size == ahead.store.frontier(0)
        assert without_namespace(ahead) == without_namespace(serial)
        assert ahead.state().partitions[0] == (1, 4 * size, len(ahead.state().outbox[0]), 0)


class TestMemory(OnMemory, ProcessingStoreContract):
    pass


class TestPostgres(OnPostgres, ProcessingStoreContract):
    pass


class TestSim(OnSim, ProcessingStoreContract):
    pass
