"""Small builders for tests: configurations, source values and records."""

from __future__ import annotations

import json
from typing import Any

from amends_core import timefmt
from amends_core.ledger import Config, Coordinates, KeyConfig, Record, StockKey

SOURCE = "test-source-v1"
ORIGIN = "2026-01-01T00:00:00Z"
K1 = StockKey("PART-1", "DEPOT-A")
K2 = StockKey("PART-2", "DEPOT-A")
K3 = StockKey("PART-3", "DEPOT-B")


def config(
    keys: list[tuple[StockKey, int, int, int]] | None = None,
    partitions: int = 1,
    namespace: str = "test-ns",
) -> Config:
    """keys: (key, opening, threshold, partition)."""
    keys = keys or [(K1, 100, 60, 0)]
    return Config(
        1,
        namespace,
        SOURCE,
        partitions,
        timefmt.parse_rfc3339(ORIGIN),
        tuple(KeyConfig(k, o, t, p) for k, o, t, p in keys),
    ).validate()


def day(n: int, hour: int = 12) -> str:
    """RFC 3339 text for January n (n may exceed 31: it rolls into later months)."""
    base = timefmt.parse_rfc3339(ORIGIN) + (n - 1) * timefmt.NS_PER_DAY
    return timefmt.format_instant(base + hour * 3600 * timefmt.NS_PER_SECOND)


def txn(
    txn_id: str = "T1",
    revision: int = 1,
    kind: str = "NEW",
    qty: int = -10,
    valid: str | None = None,
    key: StockKey = K1,
    source_time: str = "2026-02-01T00:00:00Z",
    **extra: Any,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "txn_id": txn_id,
        "revision": revision,
        "kind": kind,
        "stock_key": {"item": key.item, "location": key.location},
        "valid_time": valid or day(1),
        "qty": qty,
        "source_time": source_time,
    }
    obj.update(extra)
    return obj


def value(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def record(
    obj: dict[str, Any] | bytes,
    offset: int,
    partition: int = 0,
    key: bytes | None | str = "auto",
    source: str = SOURCE,
) -> Record:
    raw = obj if isinstance(obj, bytes) else value(obj)
    if key == "auto":
        if isinstance(obj, dict):
            sk = obj["stock_key"]
            key = StockKey(sk["item"], sk["location"]).transport_key()
        else:
            key = None
    assert key is None or isinstance(key, bytes)
    return Record(raw, key, Coordinates(source, partition, offset))


def records(objs: list[dict[str, Any]], partition: int = 0, start: int = 0) -> list[Record]:
    return [record(o, start + i, partition) for i, o in enumerate(objs)]


def mixed_history(n: int, start: int = 0) -> list[dict[str, Any]]:
    """Movements ``start``..``start + n - 1`` over K1 and K2, with amendments and cancellations
    of earlier ones (several days each): batches of it touch both keys in most ways."""
    objs = []
    for i in range(start, start + n):
        key = (K1, K2)[i % 2]
        if i % 11 == 10:
            was = (K1, K2)[(i - 4) % 2]
            objs.append(txn(f"T{i - 4}", 2, "AMEND", qty=-(i % 5) - 1, valid=day(1 + i % 9), key=was))
        elif i % 17 == 16:
            was = (K1, K2)[(i - 6) % 2]
            objs.append(txn(f"T{i - 6}", 3, "CANCEL", qty=0, valid=day(2), key=was))
        else:
            objs.append(txn(f"T{i}", qty=-(i % 7), valid=day(1 + i % 12), key=key))
    return objs


def forged(envelope: bytes) -> bytes:
    """An envelope with the same output ID and version but other content: a protocol violation."""
    obj = json.loads(envelope)
    obj["cause"]["offset"] = obj["cause"]["offset"] + 1_000_000
    return value(obj)
