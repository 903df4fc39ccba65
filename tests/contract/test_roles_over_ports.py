"""The production worker, relay and view steps over each store: whole stages end where stated.

Every test runs on each set of stores (``TestMemory``, ``TestPostgres``, ``TestSim``)
through ``schedules.Roles``; expected frontiers, envelopes and views are the
hand-stated ones of the fixtures or of the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amends_core import timefmt, wire
from amends_core.ledger import INT64_MAX, Config, Coordinates, KeyConfig, Record, StockKey
from amends_core.result import ComputeResult, RejectionRef
from tests import builders as b
from tests.contract.kinds import OnMemory, OnPostgres, OnSim
from tests.contract.schedules import Roles
from tests.contract.test_processing_store import envs

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "worked-example"


def stage_records(cfg: Config, name: str, first: int) -> list[Record]:
    recs = []
    for line in (FIXTURE / name).read_bytes().splitlines():
        t = wire.decode_transaction(line)
        assert not isinstance(t, wire.DecodeError)
        coords = Coordinates(cfg.source_incarnation, 0, first + len(recs))
        recs.append(Record(line, t.stock_key.transport_key(), coords))
    return recs


def result_json(kit: Any) -> dict[str, object]:
    st = kit.state()
    refs = [
        RejectionRef(r.record.coords.partition, r.record.coords.offset, r.reason)
        for r, _ in st.rejections
    ]
    return ComputeResult.build(kit.cfg, kit.view_state().projections(), refs, st.conflicts).to_json()


class RolesContract:
    """Whole stages through the roles, over ``make_kit``'s stores."""

    def test_worked_example_stages_reach_the_hand_stated_frontiers_envelopes_and_view(self, make_kit):
        cfg = wire.decode_config((FIXTURE / "config.json").read_bytes())
        kit = make_kit(cfg)
        roles = Roles(kit)
        for stage in json.loads((FIXTURE / "stages.json").read_text())["stages"]:
            published = len(roles.output[0])
            roles.append(0, stage_records(cfg, stage["source"], len(roles.source[0])))
            roles.drain(0)
            expected = json.loads((FIXTURE / stage["expected"]).read_text())
            assert envs(roles.output[0][published:]) == [
                (e["type"], e["day"], e["version"], e["cause_offset"]) for e in expected["envelopes"]
            ]
            assert kit.store.frontier(0) == expected["source_frontier"]
            assert kit.view.progress(0) == (expected["output_frontier"], None)
            assert result_json(kit) == expected["view"]

    def test_a_worker_stops_at_a_record_whose_close_leaves_int64_after_committing_those_before_it(self, 
        make_kit,
    ):
        kit = make_kit(b.config([(b.K1, INT64_MAX - 5, 0, 0)]))
        roles = Roles(kit, {0: b.records([
            b.txn("A", qty=3, valid=b.day(1)),
            b.txn("B", qty=3, valid=b.day(2)),  # the close would be INT64_MAX + 1
            b.txn("C", qty=1, valid=b.day(3)),
        ])})
        assert roles.work(0, 10) == ("error", "BatchAborted")
        assert kit.store.frontier(0) == 1  # the record before the failing one is committed
        assert roles.work(0, 10) == ("error", "BatchAborted")  # and the partition stays there
        assert kit.store.frontier(0) == 1
        assert kit.state().keys[b.K1].closes == [INT64_MAX - 2]

    def test_names_with_quotes_separators_backslashes_and_non_ascii_round_trip(self, make_kit):
        odd = StockKey("it'em \"1\"/x,y;z", "l\\o\tc\nation ü ☃ 𝄞 [\"a\",\"b\"]")
        cfg = Config(
            1, "ns'\"\\/;, ü-𝄞", "src 'x' \\ ü", 1, timefmt.parse_rfc3339(b.ORIGIN),
            (KeyConfig(odd, 10, 5, 0),),
        ).validate()
        kit = make_kit(cfg)
        recs = [
            b.record(b.txn("t'x\\\"ü", qty=-6, key=odd), 0, source=cfg.source_incarnation),
            b.record(b"\x00\xff'; DROP TABLE outbox; --", 1, key=b"\\x'\x00",
                     source=cfg.source_incarnation),
        ]
        roles = Roles(kit, {0: recs})
        roles.drain(0)
        st = kit.state()
        assert [r.record for r, _ in st.rejections] == recs[1:]
        assert st.keys[odd].identities["t'x\\\"ü"].revisions[1][0].txn.stock_key == odd
        assert roles.output[0] == st.outbox[0] and len(st.outbox[0]) == 3
        view = kit.view_state()
        assert {e.output_id.key for e in view.rows.values()} == {odd}
        assert view.projections()[odd].alerts[0].close == 4

    def test_reopening_the_stores_between_steps_continues_from_identical_state(self, make_kit):
        kit = make_kit(b.config([(b.K1, 100, 60, 0), (b.K2, 50, 60, 0)]))
        roles = Roles(kit, {0: b.records([
            b.txn("A", qty=-50, valid=b.day(1)),
            b.txn("B", qty=10, valid=b.day(2), key=b.K2),
            b.txn("A", 2, "AMEND", qty=-30, valid=b.day(1)),
            b.txn("C", qty=5, valid=b.day(1)),
            b.txn("C", qty=6, valid=b.day(1)),  # conflict: BLOCKED
            b.txn("C", 2, "CANCEL", qty=0, valid=b.day(1)),  # resolved
        ])})
        trace = roles.run([
            ("work", 0, 2), ("restart",), ("work", 0, 1), ("relay", 0, 2, True), ("restart",),
            ("work", 0, 2), ("view", 0, 3), ("restart",), ("work", 0, 1),
        ])
        assert trace[0][:2] == ("ok", 2)
        assert kit.store.frontier(0) == 6
        projections = kit.view_state().projections()
        assert [x.close for x in projections[b.K1].balances] == [70]
        assert [x.close for x in projections[b.K2].balances] == [60]
        assert projections[b.K1].status.value == "READY"
        assert [(c.txn_id, c.revision) for c in kit.state().conflicts] == [("C", 1)]


class TestMemory(OnMemory, RolesContract):
    pass


class TestPostgres(OnPostgres, RolesContract):
    pass


class TestSim(OnSim, RolesContract):
    pass
