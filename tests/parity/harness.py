"""One small adapter interface over both processing stores and both views.

The parity suite is written against ``Adapter`` only. ``MemoryAdapter`` wraps
the reference model (``MemoryStore`` + ``ViewState``); ``PgAdapter`` wraps the
PostgreSQL stores. A batch means "these records, in order": the memory store
commits them one by one; PostgreSQL commits them in one transaction and, when
a record hits an operation error, commits nothing, so the adapter retries the
prefix before the failing record and then raises the core error, which is
exactly what a worker does and ends in the memory store's state.

``run_schedule`` drives any adapter through a source history and a schedule of
worker, relay, view, claim and fault steps, recording what every step
observed; two adapters given the same inputs must produce equal traces and
equal final states.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from amends_core.errors import OperationError
from amends_core.ledger import (
    Config,
    Conflict,
    Envelope,
    OutputID,
    Record,
    Rejection,
    StockKey,
)
from amends_core.store.memory import MemoryStore, Token
from amends_core.view import ViewState
from amends_pipeline.postgres.errors import BatchAborted
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.postgres.view_store import PgViewStore


@dataclass(frozen=True)
class State:
    """Everything parity compares, in a store-independent shape."""

    partitions: dict[int, tuple[int, int, int, int]]
    """(epoch, exclusive frontier, last sequence, acknowledged) per partition."""
    outbox: dict[int, list[bytes]]
    outputs: dict[OutputID, Envelope]
    rejections: list[tuple[Rejection, str]]
    """Quarantine in (partition, offset) order, with the detail text."""
    conflicts: list[Conflict]
    keys: dict[StockKey, Any]
    view: ViewState


class Adapter(Protocol):
    name: str
    cfg: Config

    def claim(self, partition: int) -> Token: ...
    def frontier(self, partition: int) -> int: ...
    def process(
        self, token: Token, records: list[Record], expected: int | None = None
    ) -> list[bytes]: ...
    def pending(self, partition: int) -> list[tuple[int, bytes]]: ...
    def acknowledge(self, partition: int, sequence: int) -> None: ...
    def view_apply(self, partition: int, batch: list[tuple[int, bytes]]) -> list[str]: ...
    def view_frontier(self, partition: int) -> int: ...
    def replay(self, partition: int, records: list[Record]) -> Token: ...
    def state(self) -> State: ...
    def restart(self) -> None: ...
    def close(self) -> None: ...


class MemoryAdapter:
    name = "memory"

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.store = MemoryStore(cfg)
        self.view = ViewState(cfg)

    def claim(self, partition: int) -> Token:
        return self.store.claim(partition)

    def frontier(self, partition: int) -> int:
        return self.store.frontier(partition)

    def process(
        self, token: Token, records: list[Record], expected: int | None = None
    ) -> list[bytes]:
        exp = self.store.frontier(token.partition) if expected is None else expected
        out: list[bytes] = []
        if not records:
            self.store._guard(token, exp)
        for r in records:
            rows = self.store.commit(self.store.prepare(token, exp, r))
            out.extend(row.envelope.to_bytes() for row in rows)
            exp = r.coords.offset + 1
        return out

    def pending(self, partition: int) -> list[tuple[int, bytes]]:
        ps = self.store.partitions[partition]
        return [(r.sequence, r.envelope.to_bytes()) for r in self.store.outbox[partition][ps.acked:]]

    def acknowledge(self, partition: int, sequence: int) -> None:
        self.store.acknowledge(partition, sequence)

    def view_apply(self, partition: int, batch: list[tuple[int, bytes]]) -> list[str]:
        return [self.view.apply(partition, off, raw).effect.value for off, raw in batch]

    def view_frontier(self, partition: int) -> int:
        return self.view.frontier(partition)

    def replay(self, partition: int, records: list[Record]) -> Token:
        return self.store.replay(partition, records)

    def state(self) -> State:
        s = self.store
        rej = sorted(s.rejections, key=lambda r: (r.record.coords.partition, r.record.coords.offset))
        return State(
            {p: (ps.epoch, ps.next, ps.sequence, ps.acked) for p, ps in s.partitions.items()},
            {p: [r.envelope.to_bytes() for r in rows] for p, rows in s.outbox.items()},
            dict(s.outputs),
            [(r, r.detail) for r in rej],
            s.conflicts(),
            dict(s.keys),
            self.view.copy(),
        )

    def restart(self) -> None:
        pass

    def close(self) -> None:
        pass


class PgAdapter:
    name = "postgres"

    def __init__(self, dsn: str, schema: str, cfg: Config, *, cache: bool = True) -> None:
        self.cfg = cfg
        self.dsn = dsn
        self.schema = schema
        self.cache = cache
        self.store = PgStore.open(dsn, cfg, schema=schema, cache=cache)
        self.view = PgViewStore.open(dsn, cfg, schema=schema)

    def claim(self, partition: int) -> Token:
        return self.store.claim(partition)

    def frontier(self, partition: int) -> int:
        return self.store.frontier(partition)

    def process(
        self, token: Token, records: list[Record], expected: int | None = None
    ) -> list[bytes]:
        exp = self.store.frontier(token.partition) if expected is None else expected
        try:
            res = self.store.process(token, exp, records)
        except BatchAborted as e:
            prefix = [r for r in records if r.coords.offset < e.offset]
            if prefix:
                self.store.process(token, exp, prefix)
            cause = e.__cause__
            assert isinstance(cause, ArithmeticError | OperationError), cause
            raise cause from None
        return [row.envelope.to_bytes() for row in res.rows]

    def pending(self, partition: int) -> list[tuple[int, bytes]]:
        return [(e.sequence, e.envelope) for e in self.store.pending(partition, limit=1 << 30)]

    def acknowledge(self, partition: int, sequence: int) -> None:
        self.store.acknowledge(partition, sequence)

    def view_apply(self, partition: int, batch: list[tuple[int, bytes]]) -> list[str]:
        return [d.effect.value for d in self.view.apply(partition, batch)]

    def view_frontier(self, partition: int) -> int:
        return self.view.frontier(partition)

    def replay(self, partition: int, records: list[Record]) -> Token:
        return self.store.replay(partition, records)

    def state(self) -> State:
        snap = self.store.snapshot()
        return State(
            {p: (x.epoch, x.next, x.sequence, x.acked) for p, x in snap.partitions.items()},
            {p: [e.envelope for e in rows] for p, rows in snap.outbox.items()},
            snap.outputs,
            [(r, r.detail) for r in snap.rejections],
            snap.conflicts(),
            snap.keys,
            self.view.snapshot(),
        )

    def restart(self) -> None:
        """Reopen the stores: the next batch must rebuild key state from rows."""
        self.store.close()
        self.store = PgStore.open(self.dsn, self.cfg, schema=self.schema, cache=self.cache)

    def close(self) -> None:
        self.store.close()
        self.view.close()


# ---------------------------------------------------------------- schedules


@dataclass
class World:
    """Inputs and transport shared by a run: source history and output logs."""

    cfg: Config
    source: dict[int, list[Record]]
    output: dict[int, list[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for p in range(self.cfg.partitions):
            self.source.setdefault(p, [])
            self.output.setdefault(p, [])


def _unread(world: World, partition: int, frontier: int, n: int) -> list[Record]:
    return [r for r in world.source[partition] if r.coords.offset >= frontier][:n]


def run_schedule(adapter: Adapter, world: World, steps: list[tuple[Any, ...]]) -> list[Any]:
    """Run steps, then drain everything; return what each step observed.

    Steps: ("work", p, n) process the next n records; ("relay", p, n, dup)
    publish and acknowledge n pending rows (dup: publish each twice, as a retry
    after a lost reply would); ("view", p, n) apply n output records;
    ("redeliver", p, i) the transport delivers log entry i again; ("forge", p, i)
    an envelope with entry i's ID and version but other content appears;
    ("claim", p) a new owner takes over and the old token must be refused;
    ("restart",) the PostgreSQL store is reopened (memory: no-op).
    """
    cfg = adapter.cfg
    tokens = {p: adapter.claim(p) for p in range(cfg.partitions)}
    trace: list[Any] = []

    def work(p: int, n: int) -> Any:
        batch = _unread(world, p, adapter.frontier(p), n)
        try:
            return ("ok", adapter.process(tokens[p], batch))
        except (OperationError, ArithmeticError) as e:
            return ("error", type(e).__name__)

    def relay(p: int, n: int, dup: bool) -> Any:
        published = []
        for seq, raw in adapter.pending(p)[:n]:
            world.output[p].append(raw)
            if dup:
                world.output[p].append(raw)
            adapter.acknowledge(p, seq)
            published.append(seq)
        return published

    def view(p: int, n: int) -> Any:
        log = world.output[p]
        f = adapter.view_frontier(p)
        batch = [(off, log[off]) for off in range(f, min(len(log), f + n))]
        return adapter.view_apply(p, batch) if batch else []

    def catch_up(p: int) -> None:
        while adapter.view_frontier(p) < len(world.output[p]):
            f = adapter.view_frontier(p)
            trace.append(view(p, 5))
            if adapter.view_frontier(p) == f:
                break

    for step in steps:
        op = step[0]
        if op == "work":
            trace.append(work(step[1], step[2]))
        elif op == "relay":
            trace.append(relay(step[1], step[2], step[3]))
        elif op == "view":
            trace.append(view(step[1], step[2]))
        elif op == "redeliver":
            log = world.output[step[1]]
            if log:
                log.append(log[step[2] % len(log)])
            trace.append(len(log))
        elif op == "forge":
            log = world.output[step[1]]
            if log:
                log.append(forge(log[step[2] % len(log)]))
            trace.append(len(log))
        elif op == "claim":
            old = tokens[step[1]]
            tokens[step[1]] = adapter.claim(step[1])
            try:
                adapter.process(old, _unread(world, step[1], adapter.frontier(step[1]), 1))
                trace.append(("claim", "old owner committed"))
            except OperationError as e:
                trace.append(("claim", type(e).__name__, tokens[step[1]].epoch))
        elif op == "restart":
            adapter.restart()
            trace.append("restart")
        else:
            raise ValueError(op)
    # Drain: every enabled step until nothing changes (a stuck partition stays stuck).
    for p in range(cfg.partitions):
        while True:
            before = adapter.frontier(p)
            res = work(p, 7)
            trace.append(res)
            if res[0] == "error" or adapter.frontier(p) == before:
                break
        trace.append(relay(p, 1 << 30, False))
        catch_up(p)
        # The transport delivers the whole log again, newest first: every older
        # version must now be stale and every equal one a duplicate.
        world.output[p].extend(reversed(world.output[p]))
        catch_up(p)
    return trace


def forge(raw: bytes) -> bytes:
    """Same output ID and version, different content: a protocol violation."""
    import json

    obj = json.loads(raw)
    obj["cause"]["offset"] = obj["cause"]["offset"] + 1_000_000
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
