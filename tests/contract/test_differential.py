"""Memory against PostgreSQL on generated histories and schedules, through the production roles.

Hypothesis generates source histories (amendments, cancellations, reactivation,
conflicts, canonical duplicates, misrouted and malformed records, overflowing
quantities, offset gaps) and schedules (worker steps of every size, one batch
at a time or folded ahead, relay retries that publish twice, redelivered and
forged output, ownership claims, restarts). The worker, relay and view steps of
``amends_core.roles`` run the same inputs over the memory adapters and over
PgStore and PgViewStore (``schedules.Roles``); every step's observation, the
published output logs, and the final processing and view state must be equal.
Each example uses a fresh namespace in the test's schema.
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core import timefmt, wire
from amends_core.ledger import (
    INT64_MAX,
    INT64_MIN,
    Config,
    Coordinates,
    KeyConfig,
    Record,
    StockKey,
    Transaction,
)
from amends_pipeline.postgres import batch as pg_batch
from tests.contract.kits import MemoryKit, PgKit
from tests.contract.schedules import Roles

SOURCE = "gen-source 'v1'"
ORIGIN = timefmt.parse_rfc3339("2026-01-01T00:00:00Z")
KEYS = (
    StockKey("it'em/1", "loc\\A"),
    StockKey('ü "x"', "tab\there"),
    StockKey("a,b;c", '["x"]'),
)
PARTITION_OF = (0, 1, 0)
TXN_IDS = ("T0", "T1", "T2", "T'3")
_namespaces = itertools.count()

BIG = st.sampled_from([INT64_MAX, INT64_MIN, 2**62, -(2**62), INT64_MAX - 1])


@st.composite
def configs(draw: st.DrawFn) -> Config:
    keys = []
    for k, p in zip(KEYS, PARTITION_OF, strict=True):
        opening = draw(st.one_of(st.integers(-50, 200), BIG) if draw(st.booleans()) else
                       st.integers(-50, 200))
        keys.append(KeyConfig(k, opening, draw(st.integers(0, 150)), p))
    return Config(1, "gen", SOURCE, 2, ORIGIN, tuple(keys)).validate()


def _txn_bytes(t: Transaction) -> bytes:
    return wire.encode_transaction(t)


@st.composite
def histories(draw: st.DrawFn) -> dict[int, list[Record]]:
    n = draw(st.integers(0, 28))
    source: dict[int, list[Record]] = {0: [], 1: []}
    nxt = {0: 0, 1: 0}
    made: list[tuple[bytes, bytes | None, int]] = []
    for _ in range(n):
        tag = draw(st.sampled_from(["txn"] * 12 + ["dup"] * 2 + ["bad"] * 2 + ["misroute"]))
        ki = draw(st.integers(0, 2))
        key = KEYS[ki]
        part = PARTITION_OF[ki]
        raw_key: bytes | None = key.transport_key()
        if tag == "dup" and made:
            value, raw_key, part = made[draw(st.integers(0, len(made) - 1))]
        elif tag == "bad":
            kind = draw(st.sampled_from(["garbage", "types", "unknown", "keymismatch", "nokey"]))
            if kind == "garbage":
                value = draw(st.binary(max_size=12))
            elif kind == "types":
                value = b'{"txn_id":1,"revision":"2"}'
            else:
                t = Transaction("T0", 1, "NEW", key, ORIGIN, 1, ORIGIN)
                value = _txn_bytes(t)
                if kind == "unknown":
                    value = _txn_bytes(
                        Transaction("T0", 1, "NEW", StockKey("no", "where"), ORIGIN, 1, ORIGIN)
                    )
                elif kind == "keymismatch":
                    raw_key = KEYS[(ki + 1) % 3].transport_key()
                else:
                    raw_key = None
        else:
            kind = draw(st.sampled_from(["NEW", "NEW", "AMEND", "AMEND", "CANCEL"]))
            qty = 0 if kind == "CANCEL" else draw(
                st.one_of(st.integers(-60, 60), BIG) if draw(st.integers(0, 15)) == 0
                else st.integers(-60, 60)
            )
            valid = ORIGIN + draw(st.integers(0, 6)) * timefmt.NS_PER_DAY + draw(
                st.integers(0, 23)
            ) * 3_600_000_000_000
            t = Transaction(
                draw(st.sampled_from(TXN_IDS)),
                draw(st.integers(1, 3)),
                kind,
                key,
                valid,
                qty,
                ORIGIN + draw(st.integers(0, 10**6)),
            )
            value = _txn_bytes(t)
            if tag == "misroute":
                part = 1 - part
        offset = nxt[part] + (draw(st.integers(1, 3)) if draw(st.integers(0, 9)) == 0 else 0)
        nxt[part] = offset + 1
        source[part].append(Record(value, raw_key, Coordinates(SOURCE, part, offset)))
        made.append((value, raw_key, part))
    return source


def steps() -> st.SearchStrategy[list[tuple[object, ...]]]:
    p = st.integers(0, 1)
    step = st.one_of(
        st.tuples(st.just("work"), p, st.integers(1, 8)),
        st.tuples(st.just("work"), p, st.integers(1, 8)),
        st.tuples(st.just("relay"), p, st.integers(1, 5), st.booleans()),
        st.tuples(st.just("view"), p, st.integers(1, 6)),
        st.tuples(st.just("redeliver"), p, st.integers(0, 50)),
        st.tuples(st.just("claim"), p),
        st.tuples(st.just("restart")),
    )
    return st.lists(step, max_size=14)


BATCHING = st.sampled_from([(1000, 1), (2, 3)])
"""(batch size, ahead): one batch per worker step, or small batches folded ahead of commits."""


def run_both(
    dsn: str,
    schema: str,
    cfg: Config,
    source: dict[int, list[Record]],
    plan: list[tuple[object, ...]],
    cache: bool,
    copy_all: bool = False,
    batching: tuple[int, int] = (1000, 1),
) -> None:
    """Run the roles over memory and over PostgreSQL on the same inputs and compare everything.

    ``copy_all``: PostgreSQL writes even one-row sets with COPY (the large-batch path).
    """
    cfg = cfg.with_namespace(f"gen-{next(_namespaces)}")
    size, ahead = batching
    mem = MemoryKit(cfg)
    pg = PgKit(dsn, schema, cfg, cache=cache)
    threshold = pg_batch.COPY_MIN_ROWS
    pg_batch.COPY_MIN_ROWS = 1 if copy_all else threshold
    try:
        on_mem = Roles(mem, copy.deepcopy(source), batch_size=size, ahead=ahead)
        on_pg = Roles(pg, copy.deepcopy(source), batch_size=size, ahead=ahead)
        assert on_pg.run(plan) == on_mem.run(plan)
        assert on_pg.output == on_mem.output
        sm, sp = mem.state(), pg.state()
        assert sp.partitions == sm.partitions
        assert sp.outbox == sm.outbox
        assert sp.outputs == sm.outputs
        assert sp.rejections == sm.rejections
        assert sp.conflicts == sm.conflicts
        for k in sm.keys:
            assert sp.keys[k] == sm.keys[k], k
        assert pg.view_state() == mem.view_state()
    finally:
        pg_batch.COPY_MIN_ROWS = threshold
        pg.close()


@settings(
    max_examples=45,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    cfg=configs(), source=histories(), plan=steps(), cache=st.booleans(), copy_all=st.booleans(),
    batching=BATCHING,
)
def test_generated_histories_give_identical_envelopes_frontiers_quarantine_and_view(
    pg_dsn, pg_schema, cfg, source, plan, cache, copy_all, batching
):
    run_both(pg_dsn, pg_schema, cfg, source, plan, cache, copy_all, batching)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(cfg=configs(), source=histories(), at=st.integers(0, 40))
def test_a_forged_equal_version_stops_both_views_at_the_same_offset(
    pg_dsn, pg_schema, cfg, source, at
):
    plan = [("work", 0, 40), ("work", 1, 40), ("relay", 0, 50, False), ("forge", 0, at),
            ("view", 0, 100)]
    run_both(pg_dsn, pg_schema, cfg, source, plan, True)


FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "worked-example"


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=steps(), batching=BATCHING)
def test_worked_example_under_any_schedule_matches_the_memory_model(pg_dsn, pg_schema, plan, batching):
    cfg = wire.decode_config((FIXTURE / "config.json").read_bytes())
    recs = []
    for stage in json.loads((FIXTURE / "stages.json").read_text())["stages"]:
        for line in (FIXTURE / stage["source"]).read_bytes().splitlines():
            t = wire.decode_transaction(line)
            assert not isinstance(t, wire.DecodeError)
            recs.append(Record(line, t.stock_key.transport_key(),
                               Coordinates(cfg.source_incarnation, 0, len(recs))))
    plan = [s for s in plan if s[0] == "restart" or s[1] == 0]
    run_both(pg_dsn, pg_schema, cfg, {0: recs}, plan, True, batching=batching)
