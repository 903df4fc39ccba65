"""The adapter sets the contract suites run over, and what a test may look at beside the ports.

A suite is written once against the Protocols of ``amends_core.ports``. A kit
hands it one set of adapters of one kind:

  kind      processing store + outbox        view store                  logs
  memory    adapters.MemoryProcessing        adapters.MemoryView         MemorySource, MemoryOutput
  postgres  postgres.store.PgStore           postgres.view_store.PgViewStore
  kafka                                                                  KafkaSource, KafkaOutput,
                                                                         KafkaOutputSource
  sim       sim.faults.FaultyProcessing      sim.faults.FaultyView       SimSource, FaultyLog
            (no fault armed: every commit lands and its reply arrives)
  snapshot                                                               SnapshotThenTopic (the
                                                                         source snapshot, then Kafka)

Beside the port objects a kit offers only inspection (``state``,
``view_state``) and what an operator or a restart does (``replay``,
``reopen``); it decides nothing the adapters decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from amends_core.adapters import MemoryOutput, MemoryProcessing, MemoryView
from amends_core.ledger import Config, Conflict, Envelope, OutputID, Rejection, StockKey
from amends_core.ports import Delivery, OutboxRow, Token
from amends_core.sim.faults import FaultyProcessing, FaultyView
from amends_core.store.memory import MemoryStore
from amends_core.view import ViewState
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.postgres.view_store import PgViewStore


def envelope_bytes(envelope: bytes | Envelope) -> bytes:
    """The published bytes of an outbox row's envelope (PostgreSQL keeps bytes, memory values)."""
    return envelope if isinstance(envelope, bytes) else envelope.to_bytes()


@dataclass(frozen=True)
class State:
    """Processing state in a shape every store can be read into."""

    partitions: dict[int, tuple[int, int, int, int]]
    """(epoch, exclusive frontier, last sequence, acknowledged) per partition."""
    outbox: dict[int, list[bytes]]
    outputs: dict[OutputID, Envelope]
    rejections: list[tuple[Rejection, str]]
    """Quarantine in (partition, offset) order, with the detail text."""
    conflicts: list[Conflict]
    keys: dict[StockKey, Any]


class MemoryKit:
    """The memory adapters over a fresh ``MemoryStore`` and ``ViewState``."""

    kind = "memory"

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.memory = MemoryStore(cfg)
        self.store: Any = self.processing(self.memory)
        self.view: Any = self.view_of(ViewState(cfg))

    def processing(self, memory: MemoryStore) -> MemoryProcessing:
        return MemoryProcessing(memory)

    def view_of(self, state: ViewState) -> MemoryView:
        return MemoryView(state)

    def state(self) -> State:
        s = self.memory
        rej = sorted(s.rejections, key=lambda r: (r.record.coords.partition, r.record.coords.offset))
        return State(
            {p: (ps.epoch, ps.next, ps.sequence, ps.acked) for p, ps in s.partitions.items()},
            {p: [r.envelope.to_bytes() for r in rows] for p, rows in s.outbox.items()},
            dict(s.outputs),
            [(r, r.detail) for r in rej],
            s.conflicts(),
            dict(s.keys),
        )

    def view_state(self) -> ViewState:
        return self.view.state.copy()

    def replay(self, partition: int, records: Sequence[Any]) -> Token:
        return self.memory.replay(partition, records)

    def reopen(self) -> None:
        """Nothing outlives a restart but the state itself, which memory keeps as it is."""

    def close(self) -> None:
        pass


class SimKit(MemoryKit):
    """The simulator's fault adapters, with no fault armed."""

    kind = "sim"

    def processing(self, memory: MemoryStore) -> FaultyProcessing:
        return FaultyProcessing(memory, [], {p: [] for p in range(self.cfg.partitions)})

    def view_of(self, state: ViewState) -> FaultyView:
        return FaultyView(state)


class PgKit:
    """PgStore and PgViewStore of one namespace in a migrated schema."""

    kind = "postgres"

    def __init__(self, dsn: str, schema: str, cfg: Config, *, cache: bool = True) -> None:
        self.cfg = cfg
        self.dsn = dsn
        self.schema = schema
        self.cache = cache
        self.store: Any = PgStore.open(dsn, cfg, schema=schema, cache=cache)
        self.view: Any = PgViewStore.open(dsn, cfg, schema=schema)

    def state(self) -> State:
        snap = self.store.snapshot()
        return State(
            {p: (x.epoch, x.next, x.sequence, x.acked) for p, x in snap.partitions.items()},
            {p: [e.envelope for e in rows] for p, rows in snap.outbox.items()},
            snap.outputs,
            [(r, r.detail) for r in snap.rejections],
            snap.conflicts(),
            snap.keys,
        )

    def view_state(self) -> ViewState:
        return self.view.snapshot()

    def replay(self, partition: int, records: Sequence[Any]) -> Token:
        return self.store.replay(partition, records)

    def reopen(self) -> None:
        """A new session and no cached key state: the next batch reads its keys from the rows."""
        self.store.close()
        self.store = PgStore.open(self.dsn, self.cfg, schema=self.schema, cache=self.cache)

    def close(self) -> None:
        self.store.close()
        self.view.close()


class ListLog(MemoryOutput):
    """Output logs as lists of bytes, for the outbox rows of any store (``OutputLog``, ``OutputSource``).

    ``lose_reply``: the next publication lands but no delivery report comes back,
    as when the log did not answer in time; the relay's retry publishes again.
    """

    def __init__(self, logs: dict[int, list[Any]]) -> None:
        super().__init__(logs)
        self.lose_reply = False

    def publish(self, partition: int, rows: Sequence[Any]) -> Delivery:
        log = self.logs[partition]
        delivery = Delivery()
        for r in rows:
            log.append(envelope_bytes(r.envelope))
            if not self.lose_reply:
                delivery.delivered[r.sequence] = len(log) - 1
        self.lose_reply = False
        return delivery


def memory_row(partition: int, sequence: int, envelope: Envelope) -> OutboxRow:
    return OutboxRow(partition, sequence, envelope)


__all__ = [
    "ListLog", "MemoryKit", "PgKit", "SimKit", "State", "envelope_bytes", "memory_row",
]
