"""Turn input files into messages for the source topic (``amends load``, the demo, ``amends up``).

Files are read by the one parser ``amends compute`` uses too
(``amends_core.records.InputReader``): the same lines are accepted and refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from amends_core import wire
from amends_core.ledger import Config
from amends_core.records import InputReader


@dataclass(frozen=True, slots=True)
class Outgoing:
    partition: int
    key: bytes | None
    value: bytes


def load_plan(cfg: Config, reader: InputReader, default_partition: int = 0) -> list[Outgoing]:
    """What is sent: raw values first (file order), then framed records.

    A raw value whose stock key is configured goes to that key's partition with
    the canonical transport key; anything else (undecodable, unknown key) goes
    to ``default_partition`` without a key, so that the worker quarantines it
    instead of it vanishing. Framed records go to their partition with their
    key, in offset order (Kafka assigns its own offsets).
    """
    out: list[Outgoing] = []
    for raw in reader.raw_lines:
        t = wire.decode_transaction(raw.value)
        kc = None if isinstance(t, wire.DecodeError) else cfg.key_config(t.stock_key)
        if kc is None or isinstance(t, wire.DecodeError):
            out.append(Outgoing(default_partition, None, raw.value))
        else:
            out.append(Outgoing(kc.partition, t.stock_key.transport_key(), raw.value))
    out.extend(Outgoing(f.partition, f.key, f.value) for f in reader.framed())
    return out


def plan_file(cfg: Config, name: str, content: bytes, default_partition: int = 0) -> list[Outgoing]:
    """``load_plan`` of one file already in memory (a fixture); RecordsError naming NAME:LINE."""
    reader = InputReader(cfg.partitions)
    reader.add_file(name, content.splitlines(keepends=True))
    return load_plan(cfg, reader, default_partition)
