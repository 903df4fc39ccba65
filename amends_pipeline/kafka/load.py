"""Turn fixture or framed files into messages for the source topic."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from amends_core import wire
from amends_core.ledger import Config
from amends_core.records import RecordsError, parse_line


@dataclass(frozen=True, slots=True)
class Outgoing:
    partition: int
    key: bytes | None
    value: bytes


def plan(
    cfg: Config, lines: Iterable[tuple[str, bytes]], default_partition: int = 0
) -> list[Outgoing]:
    """Messages for every non-empty line, in file order.

    A line is either a framed record (``{"partition","offset","key","value"|"value_b64"}``,
    sent to its partition with its key; the offset only orders lines and Kafka
    assigns its own) or a raw source value. A raw value whose stock key is
    configured goes to that key's partition with the canonical transport key;
    anything else (undecodable, unknown key) goes to ``default_partition``
    without a key, so that the worker quarantines it instead of it vanishing.
    """
    out: list[Outgoing] = []
    framed: list[tuple[int, int, Outgoing]] = []
    for where, line in lines:
        if not line.strip():
            continue
        obj = wire.parse_json_object(line)
        if isinstance(obj, dict) and "partition" in obj and "offset" in obj and "txn_id" not in obj:
            fr = parse_line(line, where)
            if fr.partition >= cfg.partitions:
                msg = f"{where}: partition {fr.partition} outside 0..{cfg.partitions - 1}"
                raise RecordsError(msg)
            framed.append((fr.partition, fr.offset, Outgoing(fr.partition, fr.key, fr.value)))
            continue
        t = wire.decode_transaction(line)
        kc = None if isinstance(t, wire.DecodeError) else cfg.key_config(t.stock_key)
        if kc is None or isinstance(t, wire.DecodeError):
            out.append(Outgoing(default_partition, None, line))
        else:
            out.append(Outgoing(kc.partition, t.stock_key.transport_key(), line))
    framed.sort(key=lambda x: (x[0], x[1]))
    return out + [o for _, _, o in framed]
