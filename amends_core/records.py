"""The framed RECORDS.jsonl format of ``amends compute`` and ``amends load``.

One source record per line: ``{"partition":int,"offset":int,"key":str|null,
"value":str}``; ``value_b64`` (base64) may stand in for ``value``. Text is
turned back into bytes with ``surrogatepass`` so that a lone surrogate in the
file becomes invalid UTF-8 in the value and is rejected as MALFORMED instead of
failing the whole file.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from amends_core.ledger import Coordinates, Record


class RecordsError(ValueError):
    """A framing line is unusable; the message names file position and problem."""


@dataclass(frozen=True, slots=True)
class FramedRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes

    def record(self, source: str) -> Record:
        return Record(self.value, self.key, Coordinates(source, self.partition, self.offset))


def _text_bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _loads_lenient(line: bytes) -> object:
    # The framing may carry lone surrogates inside "value" on purpose (they become
    # invalid UTF-8 in the record and are rejected there), so plain json is used.
    return json.loads(line.decode("utf-8"))


def parse_line(line: bytes, where: str) -> FramedRecord:
    try:
        obj = _loads_lenient(line)
    except (UnicodeDecodeError, ValueError) as e:
        msg = f"{where}: not a JSON object line ({str(e)[:60]})"
        raise RecordsError(msg) from None
    if not isinstance(obj, dict):
        msg = f"{where}: not a JSON object line"
        raise RecordsError(msg)
    allowed = {"partition", "offset", "key", "value", "value_b64"}
    extra = set(obj) - allowed
    if extra:
        msg = f"{where}: unknown member {sorted(extra)[0]!r}"
        raise RecordsError(msg)
    p, o = obj.get("partition"), obj.get("offset")
    if type(p) is not int or type(o) is not int or p < 0 or o < 0:
        msg = f"{where}: partition and offset must be non-negative integers"
        raise RecordsError(msg)
    if ("value" in obj) == ("value_b64" in obj):
        msg = f"{where}: exactly one of value and value_b64 is required"
        raise RecordsError(msg)
    if "value" in obj:
        if not isinstance(obj["value"], str):
            msg = f"{where}: value must be a string"
            raise RecordsError(msg)
        value = _text_bytes(obj["value"])
    else:
        if not isinstance(obj["value_b64"], str):
            msg = f"{where}: value_b64 must be a string"
            raise RecordsError(msg)
        try:
            value = base64.b64decode(obj["value_b64"], validate=True)
        except (binascii.Error, ValueError):
            msg = f"{where}: value_b64 is not valid base64"
            raise RecordsError(msg) from None
    if "key" not in obj:
        msg = f"{where}: member 'key' is required (null for no key)"
        raise RecordsError(msg)
    k = obj["key"]
    if k is not None and not isinstance(k, str):
        msg = f"{where}: key must be a string or null"
        raise RecordsError(msg)
    return FramedRecord(p, o, None if k is None else _text_bytes(k), value)


def parse_records(data: bytes, name: str = "records") -> list[FramedRecord]:
    out = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        out.append(parse_line(line, f"{name}:{n}"))
    return out


def order_records(
    framed: list[FramedRecord], partitions: int, source: str
) -> dict[int, list[Record]]:
    """Group by partition in offset order; refuse unknown partitions and repeated offsets."""
    by_p: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    for fr in framed:
        if fr.partition >= partitions:
            msg = (
                f"record at offset {fr.offset} names partition {fr.partition},"
                f" configuration has {partitions}"
            )
            raise RecordsError(msg)
        by_p[fr.partition].append(fr.record(source))
    for p, recs in by_p.items():
        recs.sort(key=lambda r: r.coords.offset)
        for a, b in zip(recs, recs[1:], strict=False):
            if a.coords.offset == b.coords.offset:
                msg = f"partition {p} has offset {a.coords.offset} twice"
                raise RecordsError(msg)
    return by_p


def encode_line(r: Record) -> str:
    """Framed line for a record (value as text when it is valid UTF-8, else base64)."""
    from amends_core.ledger import compact_json

    obj: dict[str, object] = {"partition": r.coords.partition, "offset": r.coords.offset}
    # Keys are text in this format; a key that is not UTF-8 cannot be framed here.
    obj["key"] = None if r.key is None else r.key.decode("utf-8", "surrogatepass")
    try:
        obj["value"] = r.value.decode("utf-8")
    except UnicodeDecodeError:
        obj["value_b64"] = base64.b64encode(r.value).decode("ascii")
    return compact_json(obj)
