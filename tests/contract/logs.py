"""The source and output logs the log contract suites run over (see ``kits`` for the stores).

A source kit is one source partition (partition 0) that a test fills with
messages, (key, value) each, and reads through the ``SourceLog`` port. An
output kit is the output log as a relay publishes to it (``OutputLog``) and as
a view reads it (``OutputSource``), with ``row`` making an outbox row of the
type that log is given in production.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka import TopicPartition

from amends_core.adapters import MemoryOutput, MemorySource
from amends_core.ledger import Config, Coordinates, Envelope, Record
from amends_core.ports import OutboxRow
from amends_core.sim.faults import FaultyLog, SimSource
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import Reader, Writer
from amends_pipeline.ops.provision import provision
from amends_pipeline.ops.snapshot import take
from amends_pipeline.postgres.store import OutboxEntry
from amends_pipeline.roles.relay import KafkaOutput
from amends_pipeline.roles.view import KafkaOutputSource
from amends_pipeline.roles.worker import KafkaSource
from amends_pipeline.runtime import Runtime

Message = tuple[bytes | None, bytes]
"""(key, value) of one source message."""


class MemorySourceKit:
    kind = "memory"

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.records: list[Record] = []
        self.offsets: list[int] = []
        self.log: Any = self.source(self.records, self.offsets)

    def source(self, records: list[Record], offsets: list[int]) -> MemorySource:
        return MemorySource(records, offsets)

    def append(self, messages: Sequence[Message]) -> None:
        for key, value in messages:
            offset = self.offsets[-1] + 1 if self.offsets else 0
            self.records.append(Record(value, key, Coordinates(self.cfg.source_incarnation, 0, offset)))
            self.offsets.append(offset)

    def close(self) -> None:
        pass


class SimSourceKit(MemorySourceKit):
    kind = "sim"

    def source(self, records: list[Record], offsets: list[int]) -> SimSource:
        return SimSource(records, offsets)


class KafkaSourceKit:
    """A provisioned source topic on the real broker (its marker message included)."""

    kind = "kafka"

    def __init__(self, cfg: Config, dsn: str, schema: str, broker: RealBroker, topics: Any) -> None:
        self.rt = Runtime(cfg, dsn=dsn, schema=schema, bootstrap=broker.bootstrap)
        self.topic = topics("source")
        self.manifest = provision(self.rt, self.topic, topics("output")).manifest
        self.reader = self.rt.reader(self.topic)
        self.writer = Writer(broker.bootstrap)
        self.log: Any = KafkaSource(self.reader, self.manifest, 0)

    def append(self, messages: Sequence[Message]) -> None:
        for key, value in messages:
            self.writer.produce(self.topic, 0, value, key)
        self.writer.flush()

    def close(self) -> None:
        self.reader.close()


class SnapshotSourceKit(KafkaSourceKit):
    """The source a worker reads (``Runtime.source``) when retention deleted what the snapshot holds.

    Each ``append`` produces the first half of its messages, captures the whole topic into
    the source snapshot (a Delta table in the test's folder) and deletes the captured records
    from the topic, as retention would, then produces the second half: every read starts in
    the table and goes on in the topic.
    """

    kind = "snapshot"

    def __init__(self, cfg: Config, dsn: str, schema: str, broker: RealBroker, topics: Any, where: str) -> None:
        super().__init__(cfg, dsn, schema, broker, topics)
        self.broker = broker
        self.rt.snapshot_uri = where
        self.log = self.rt.source(self.reader, self.manifest, 0)

    def append(self, messages: Sequence[Message]) -> None:
        half = len(messages) // 2
        super().append(messages[:half])
        if half:
            end = take(self.rt, [0]).appended[0].end
            admin = self.broker.admin()  # kept while its futures run
            for f in admin.delete_records([TopicPartition(self.topic, 0, end)]).values():
                f.result(timeout=30)
        super().append(messages[half:])


class MemoryOutputKit:
    kind = "memory"

    def __init__(self, partitions: int) -> None:
        self.logs: dict[int, list[Any]] = {p: [] for p in range(partitions)}
        self.log: Any = self.output(self.logs)
        self.source: Any = self.log

    def output(self, logs: dict[int, list[Any]]) -> MemoryOutput:
        return MemoryOutput(logs)

    def row(self, partition: int, sequence: int, envelope: Envelope) -> Any:
        return OutboxRow(partition, sequence, envelope)

    def close(self) -> None:
        pass


class SimOutputKit(MemoryOutputKit):
    kind = "sim"

    def output(self, logs: dict[int, list[Any]]) -> FaultyLog:
        return FaultyLog(logs)


class KafkaOutputKit:
    """A log-compacted output topic on the real broker, written and read as the relay and view do."""

    kind = "kafka"

    def __init__(self, partitions: int, broker: RealBroker, topic: str) -> None:
        broker.create_topic(topic, partitions, {"cleanup.policy": "compact"})
        self.reader = Reader(broker.bootstrap, topic)
        self.log: Any = KafkaOutput(Writer(broker.bootstrap), topic)
        self.source: Any = KafkaOutputSource(self.reader)

    def row(self, partition: int, sequence: int, envelope: Envelope) -> Any:
        return OutboxEntry(partition, sequence, envelope.to_bytes(), False, None, None)

    def close(self) -> None:
        self.reader.close()


__all__ = [
    "KafkaOutputKit", "KafkaSourceKit", "MemoryOutputKit", "MemorySourceKit", "Message",
    "SimOutputKit", "SimSourceKit", "SnapshotSourceKit",
]
