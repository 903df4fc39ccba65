"""The Outbox contract: the rows a relay publishes, in order, and their strictly ordered acknowledgement.

Every test runs on each outbox (``TestMemory``, ``TestPostgres``, ``TestSim``). A
pending row is only known by its ``sequence`` and the envelope it carries.
"""

from __future__ import annotations

from typing import Any

import pytest

from amends_core.errors import OutboxOrderError
from tests import builders as b
from tests.contract.kinds import OnMemory, OnPostgres, OnSim
from tests.contract.kits import envelope_bytes


def committed(kit: Any, partition: int = 0, n: int = 4) -> list[bytes]:
    """Commit ``n`` movements on distinct days (n + 1 outbox rows: a status comes with the first)."""
    key = (b.K1, b.K2)[partition]
    tok = kit.store.claim(partition)
    objs = [b.txn(f"T{i}", valid=b.day(i + 1), key=key) for i in range(n)]
    res = kit.store.process(tok, 0, b.records(objs, partition=partition))
    return [envelope_bytes(r.envelope) for r in res.rows]


def pending(kit: Any, partition: int = 0, limit: int = 100) -> list[int]:
    return [r.sequence for r in kit.store.pending(partition, limit)]


class OutboxContract:
    """The Outbox rules, asked of ``make_kit``'s stores."""

    def test_pending_rows_come_in_sequence_order_with_the_envelopes_the_batch_committed(self, make_kit):
        kit = make_kit(b.config())
        assert (pending(kit), kit.store.pending_count(0)) == ([], 0)
        out = committed(kit)
        rows = kit.store.pending(0, limit=100)
        assert [r.sequence for r in rows] == [1, 2, 3, 4, 5]
        assert [envelope_bytes(r.envelope) for r in rows] == out
        assert len(out) == 5
        assert pending(kit, limit=2) == [1, 2]
        assert pending(kit, limit=1) == [1]
        assert kit.store.pending_count(0) == 5

    def test_acknowledging_anything_but_the_pending_prefix_acknowledges_nothing(self, make_kit):
        kit = make_kit(b.config())
        committed(kit)
        for bad in ([(2, 10)], [(1, 10), (3, 11)], [(1, 10), (2, 11), (2, 12)], [(0, 1)], [(6, 1)]):
            with pytest.raises(OutboxOrderError):
                kit.store.acknowledge_many(0, bad)
            assert kit.store.pending_count(0) == 5
        kit.store.acknowledge_many(0, [(1, 100), (2, 101)])
        assert pending(kit) == [3, 4, 5]
        for again in ([(1, 100)], [(2, 101)], [(4, 103)]):  # already acknowledged, or past the prefix
            with pytest.raises(OutboxOrderError, match="pending is 3"):
                kit.store.acknowledge_many(0, again)
        kit.store.acknowledge_many(0, [(3, None)])
        kit.store.acknowledge_many(0, [(4, None), (5, 104)])
        with pytest.raises(OutboxOrderError, match="pending is None"):
            kit.store.acknowledge_many(0, [(6, None)])
        assert (pending(kit), kit.store.pending_count(0)) == ([], 0)
        assert kit.state().partitions[0][2:] == (5, 5)

    def test_each_partition_has_its_own_outbox_sequence_and_acknowledgement(self, make_kit):
        kit = make_kit(b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 1)], partitions=2))
        zero = committed(kit, 0, 2)
        one = committed(kit, 1, 1)
        assert (pending(kit, 0), pending(kit, 1)) == ([1, 2, 3], [1, 2])
        kit.store.acknowledge_many(1, [(1, None), (2, None)])
        assert (pending(kit, 0), pending(kit, 1)) == ([1, 2, 3], [])
        assert [envelope_bytes(r.envelope) for r in kit.store.pending(0, 10)] == zero
        assert len(one) == 2


class TestMemory(OnMemory, OutboxContract):
    pass


class TestPostgres(OnPostgres, OutboxContract):
    pass


class TestSim(OnSim, OutboxContract):
    pass
