"""Seeded generation of source histories and fault schedules.

All randomness comes from one ``random.Random(seed)`` created here; the same
seed always yields the same trace. Generation is swarm-style: each seed first
draws which history features and which faults it uses (and how often), so
that rare combinations get schedules of their own instead of being diluted.

Histories use three keys on two partitions (two keys share partition 0) and
contain new records, amendments, moves between days, cancellations and
reactivations, canonical duplicates (also with another source time),
same-revision conflicts and their resolution by a higher revision, late lower
revisions, malformed values, misrouted records, transport-key mismatches and
unknown keys; a few adjacent deliveries are swapped so revisions also arrive
out of order. Schedules mix every actor and outcome.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from amends_core import timefmt, wire
from amends_core.ledger import (
    Config,
    Coordinates,
    KeyConfig,
    Kind,
    Record,
    StockKey,
    Transaction,
    compact_json,
)
from amends_core.sim.model import Actor, Outcome, Step
from amends_core.sim.trace import Trace

ORIGIN_NS = timefmt.parse_rfc3339("2026-01-01T00:00:00Z")
KEY_A = StockKey("ITEM-A", "DEPOT-1")
KEY_B = StockKey("ITEM-B", "DEPOT-1")
KEY_C = StockKey("ITEM-C", "DEPOT-2")

SIM_CONFIG = Config(
    schema_version=1,
    namespace="sim",
    source_incarnation="sim-source-v1",
    partitions=2,
    origin_ns=ORIGIN_NS,
    keys=(
        KeyConfig(KEY_A, 100, 60, 0),
        KeyConfig(KEY_B, 40, 25, 0),
        KeyConfig(KEY_C, 30, 10, 1),
    ),
).validate()

FEATURES = (
    "amend", "move", "cancel", "reactivate", "duplicate", "conflict", "resolve",
    "stale", "malformed", "misrouted", "late",
)
FAULTS = ("abort", "unknown", "claim", "prepare", "redeliver", "park")


@dataclass(slots=True)
class _Ident:
    key: StockKey
    txn_id: str
    highest: int
    kind: str
    day: int
    qty: int
    conflicted: bool = False
    emitted: list[Transaction] = field(default_factory=list)


def instant(day: int, hour: int) -> int:
    """Valid instant of ``hour`` o'clock on day ``day`` (day 1 is the origin's day)."""
    return ORIGIN_NS + (day - 1) * timefmt.NS_PER_DAY + hour * 3600 * timefmt.NS_PER_SECOND


class HistoryGenerator:
    """Draws a history from an explicit ``random.Random``."""

    def __init__(self, rnd: random.Random, cfg: Config = SIM_CONFIG) -> None:
        self.rnd = rnd
        self.cfg = cfg
        self.idents: list[_Ident] = []
        self.next_id: dict[StockKey, int] = {kc.key: 1 for kc in cfg.keys}
        self.out: dict[int, list[tuple[bytes, bytes | None]]] = {
            p: [] for p in range(cfg.partitions)
        }
        on = {f: rnd.random() < 0.7 for f in FEATURES}
        self.weights = {
            "new": 4.0,
            "amend": 2.0 * on["amend"],
            "move": 1.5 * on["move"],
            "cancel": 1.2 * on["cancel"],
            "reactivate": 1.0 * on["reactivate"],
            "duplicate": 1.0 * on["duplicate"],
            "conflict": 1.0 * on["conflict"],
            "resolve": 1.5 * on["resolve"],
            "stale": 0.8 * on["stale"],
            "malformed": 0.8 * on["malformed"],
            "misrouted": 0.6 * on["misrouted"],
        }
        self.late = on["late"]

    # ------------------------------------------------------------ emission

    def _source_ns(self) -> int:
        return ORIGIN_NS + self.rnd.randint(40, 90) * timefmt.NS_PER_DAY

    def _qty(self) -> int:
        return self.rnd.choice((-45, -30, -25, -20, -10, -5, 0, 5, 15, 30, 50))

    def _emit(self, txn: Transaction, partition: int | None = None, key: bytes | None = None) -> None:
        kc = self.cfg.key_config(txn.stock_key)
        p = partition if partition is not None else (kc.partition if kc else 0)
        tk = key if key is not None else txn.stock_key.transport_key()
        self.out[p].append((wire.encode_transaction(txn), tk))

    def _txn(self, ident: _Ident, revision: int, kind: str, day: int, qty: int) -> Transaction:
        t = Transaction(
            ident.txn_id, revision, kind, ident.key,
            instant(day, self.rnd.randrange(24)), qty, self._source_ns(),
        )
        ident.emitted.append(t)
        return t

    # ------------------------------------------------------------ operations

    def _new(self) -> bool:
        kc = self.rnd.choice(self.cfg.keys)
        n = self.next_id[kc.key]
        if n > 3:
            return False
        self.next_id[kc.key] = n + 1
        ident = _Ident(kc.key, f"T{n}", 1, Kind.NEW, self.rnd.randint(1, 5), self._qty())
        self.idents.append(ident)
        self._emit(self._txn(ident, 1, Kind.NEW, ident.day, ident.qty))
        return True

    def _pick(self, want: str) -> _Ident | None:
        pool = {
            "any": self.idents,
            "active": [i for i in self.idents if i.kind != Kind.CANCEL and not i.conflicted],
            "cancelled": [i for i in self.idents if i.kind == Kind.CANCEL and not i.conflicted],
            "conflicted": [i for i in self.idents if i.conflicted],
            "settled": [i for i in self.idents if not i.conflicted],
            "revised": [i for i in self.idents if i.highest > 1],
        }[want]
        return self.rnd.choice(pool) if pool else None

    def _raise(self, ident: _Ident, kind: str, day: int, qty: int) -> None:
        ident.highest += 1
        ident.kind, ident.day, ident.qty, ident.conflicted = kind, day, qty, False
        self._emit(self._txn(ident, ident.highest, kind, day, qty))

    def _operation(self, op: str) -> bool:
        r = self.rnd
        if op == "new":
            return self._new()
        if op in ("amend", "move", "cancel", "reactivate", "resolve", "conflict"):
            ident = self._pick(
                {"amend": "active", "move": "active", "cancel": "active",
                 "reactivate": "cancelled", "resolve": "conflicted", "conflict": "settled"}[op]
            )
            if ident is None:
                return False
            if op == "amend":
                self._raise(ident, Kind.AMEND, ident.day, self._qty())
            elif op == "move":
                other_day = r.choice([d for d in range(1, 6) if d != ident.day])
                self._raise(ident, Kind.AMEND, other_day, ident.qty)
            elif op == "cancel":
                self._raise(ident, Kind.CANCEL, ident.day, 0)
            elif op == "reactivate":
                self._raise(ident, r.choice((Kind.NEW, Kind.AMEND)), r.randint(1, 5), self._qty())
            elif op == "resolve":
                self._raise(ident, Kind.AMEND, r.randint(1, 5), self._qty())
            else:  # a distinct candidate at the current highest revision
                qty = ident.qty + r.choice((-7, 3, 11)) if ident.kind != Kind.CANCEL else 5
                ident.conflicted = True
                self._emit(self._txn(ident, ident.highest, Kind.AMEND, ident.day, qty))
            return True
        if op == "duplicate":
            ident = self._pick("any")
            if ident is None or not ident.emitted:
                return False
            t = r.choice(ident.emitted)
            if r.random() < 0.5:  # another source time is still the same assertion
                t = Transaction(
                    t.txn_id, t.revision, t.kind, t.stock_key, t.valid_ns, t.qty, self._source_ns()
                )
            self._emit(t)
            return True
        if op == "stale":
            ident = self._pick("revised")
            if ident is None:
                return False
            rev = r.randint(1, ident.highest - 1)
            self._emit(self._txn(ident, rev, Kind.NEW, r.randint(1, 5), self._qty()))
            return True
        if op == "malformed":
            self._malformed()
            return True
        if op == "misrouted":
            self._misrouted()
            return True
        raise AssertionError(op)

    def _malformed(self) -> None:
        r = self.rnd
        kc = r.choice(self.cfg.keys)
        good = Transaction("BAD", 1, Kind.NEW, kc.key, instant(2, 9), -5, self._source_ns())
        body = wire.encode_transaction(good)
        choice = r.randrange(7)
        if choice == 0:
            value = b"not json at all"
        elif choice == 1:
            value = body[: len(body) // 2]
        elif choice == 2:
            value = body.replace(b'"qty":-5', b'"qty":-5.5')
        elif choice == 3:
            value = body.replace(b',"source_time"', b',"extra":1,"source_time"')
        elif choice == 4:
            value = wire.encode_transaction(
                Transaction("BAD", 1, Kind.CANCEL, kc.key, instant(2, 9), 3, self._source_ns())
            )
        elif choice == 5:
            value = wire.encode_transaction(
                Transaction("BAD", 0, Kind.NEW, kc.key, instant(2, 9), 1, self._source_ns())
            )
        else:
            value = body[:-1] + b'}{"x":1}'
        self.out[kc.partition].append((value, kc.key.transport_key()))

    def _misrouted(self) -> None:
        r = self.rnd
        kc = r.choice(self.cfg.keys)
        t = Transaction("MIS", 1, Kind.NEW, kc.key, instant(r.randint(1, 5), 8), -5, self._source_ns())
        choice = r.randrange(4)
        if choice == 0:  # valid assertion on the other partition
            self._emit(t, partition=(kc.partition + 1) % self.cfg.partitions)
        elif choice == 1:  # transport key names another configured key
            other = next(k for k in self.cfg.keys if k.key != kc.key)
            self._emit(t, key=other.key.transport_key())
        elif choice == 2:  # no usable transport key
            self.out[kc.partition].append((wire.encode_transaction(t), b"not-a-key"))
        else:  # a stock key that is not configured
            ghost = StockKey("GHOST", kc.key.location)
            g = Transaction("MIS", 1, Kind.NEW, ghost, t.valid_ns, -5, t.source_ns)
            self.out[kc.partition].append(
                (wire.encode_transaction(g), compact_json([ghost.item, ghost.location]).encode())
            )

    # ------------------------------------------------------------ assembly

    def history(self, count: int) -> list[Record]:
        ops = [op for op, w in self.weights.items() if w > 0]
        weights = [self.weights[op] for op in ops]
        made, tries = 0, 0
        while made < count and tries < count * 20:
            tries += 1
            if self._operation(self.rnd.choices(ops, weights)[0]):
                made += 1
        records: list[Record] = []
        for p, items in self.out.items():
            items = list(items)
            if self.late and len(items) > 1:
                for _ in range(self.rnd.randint(1, 2)):
                    i = self.rnd.randrange(len(items) - 1)
                    items[i], items[i + 1] = items[i + 1], items[i]
            offset = 0
            for value, key in items:
                if self.rnd.random() < 0.05:
                    offset += 1  # a gap in source offsets (e.g. a compacted slot)
                records.append(Record(value, key, Coordinates(self.cfg.source_incarnation, p, offset)))
                offset += 1
        return records


def schedule(rnd: random.Random, cfg: Config, count: int) -> list[Step]:
    """A random fault schedule; each seed first picks which faults it uses."""
    on = {f: rnd.random() < 0.75 for f in FAULTS}
    if not (on["abort"] or on["unknown"]):
        on["unknown"] = True  # every schedule carries failed or lost replies
    actors = [
        (Actor.WORKER, 6.0), (Actor.RELAY, 5.0), (Actor.VIEW, 5.0), (Actor.TICK, 2.5),
        (Actor.PREPARE, 1.0 * on["prepare"]), (Actor.CLAIM, 1.0 * on["claim"]),
        (Actor.REDELIVER, 1.5 * on["redeliver"]),
        (Actor.RESUME_WORKER, 0.5 * on["park"]), (Actor.RESUME_RELAY, 0.5 * on["park"]),
        (Actor.RESUME_VIEW, 0.5 * on["park"]),
    ]
    names = [a for a, w in actors if w > 0]
    aw = [w for _, w in actors if w > 0]
    outcomes = [
        (Outcome.COMMIT, 6.0),
        (Outcome.ABORT, 1.5 * on["abort"]),
        (Outcome.UNKNOWN_COMMITTED, 1.5 * on["unknown"]),
        (Outcome.UNKNOWN_ABORTED, 1.0 * on["unknown"]),
    ]
    onames = [o for o, w in outcomes if w > 0]
    ow = [w for _, w in outcomes if w > 0]
    steps = []
    for _ in range(count):
        actor = rnd.choices(names, aw)[0]
        p = rnd.randrange(cfg.partitions)
        outcome = Outcome.COMMIT
        if actor in (Actor.WORKER, Actor.RELAY, Actor.VIEW, Actor.CLAIM):
            outcome = rnd.choices(onames, ow)[0]
        offset = rnd.randrange(64) if actor is Actor.REDELIVER else 0
        steps.append(Step(actor, p if actor is not Actor.TICK else 0, outcome, offset))
    return steps


def generate(
    seed: int,
    *,
    max_records: int = 8,
    max_steps: int = 80,
    cfg: Config = SIM_CONFIG,
    toolchain: str = "unknown",
    ahead: int = 1,
) -> Trace:
    """The trace of one seed: a history and a fault schedule, nothing else random.

    ``ahead`` (batches per worker step) is recorded in the trace; it draws nothing, so a seed
    gives the same history and schedule whatever it is.
    """
    rnd = random.Random(seed)
    n_records = rnd.randint(2, max_records)
    records = HistoryGenerator(rnd, cfg).history(n_records)
    steps = schedule(rnd, cfg, rnd.randint(max_steps // 2, max_steps))
    return Trace(cfg, tuple(records), tuple(steps), seed=seed, toolchain=toolchain, ahead=ahead)
