"""Input files of ``amends load`` and ``amends compute``: one reading for both.

A file holds one of two kinds of lines (never both):

* framed records, one ``{"partition":int,"offset":int,"key":str|null,
  "value":str}`` object per line; ``value_b64`` (base64) may stand in for
  ``value``. The offset orders the records of a partition (Kafka assigns its
  own offsets when the file is loaded).
* raw source values, one message value per line (the fixture files). Only
  ``amends load`` sends them; ``amends compute`` needs framed records.

A line is framed when it is a JSON object without ``txn_id`` that names a
framing member (partition, offset, key, value, value_b64); from then on it must
be a correct framed record. Everything else is a raw value. Both commands
classify and check lines here, so they accept the same framed files and refuse
the others with the same one-line error, always ``FILE:LINE: problem``.

Text is turned back into bytes with ``surrogatepass`` so that a lone surrogate
in the file becomes invalid UTF-8 in the value and is rejected as MALFORMED
instead of failing the whole file.

Pure: the commands read the files (within ``MAX_FILE_BYTES``, line by line
within ``MAX_LINE_BYTES``) and hand the lines to ``InputReader``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from amends_core.ledger import Coordinates, Record
from amends_core.limits import (
    CHUNK_BYTES,
    MAX_LINE_BYTES,
    MAX_LINE_DEPTH,
    MAX_OFFSET,
)

# The input-file limits are declared with the others in amends_core.limits.


FRAMING_MEMBERS = frozenset({"partition", "offset", "key", "value", "value_b64"})
"""Member names of a framed line; a JSON object naming one of them (and no
``txn_id``) is a framed line."""


class RecordsError(ValueError):
    """An input line or file is unusable; the message names ``FILE:LINE`` and the problem."""


@dataclass(frozen=True, slots=True)
class FramedRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    where: str = field(default="", compare=False)
    """``FILE:LINE`` of the line (for messages; never compared)."""

    def record(self, source: str) -> Record:
        return Record(self.value, self.key, Coordinates(source, self.partition, self.offset))


@dataclass(frozen=True, slots=True)
class RawLine:
    """A line that is not framed: a raw source value, sent as it is by ``amends load``."""

    value: bytes
    where: str


def _text_bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _nesting_ok(line: bytes) -> bool:
    """No array or object nested deeper than MAX_LINE_DEPTH, counted outside strings."""
    if line.count(b"[") + line.count(b"{") <= MAX_LINE_DEPTH:
        return True  # cannot nest deeper than the number of openers (counted in C)
    depth = 0
    in_str = esc = False
    for ch in line:
        if in_str:
            if esc:
                esc = False
            elif ch == 0x5C:  # backslash
                esc = True
            elif ch == 0x22:  # quote
                in_str = False
        elif ch == 0x22:
            in_str = True
        elif ch in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > MAX_LINE_DEPTH:
                return False
        elif ch in (0x5D, 0x7D):  # ] }
            depth -= 1
    return True


class _Members(dict[str, Any]):
    """A parsed JSON object that remembers the first member name it was given twice."""

    __slots__ = ("repeated",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.repeated: str | None = None
        if len(self) != len(pairs):
            seen: set[str] = set()
            for k, _ in pairs:
                if k in seen:
                    self.repeated = k
                    break
                seen.add(k)


def _parse(line: bytes) -> object:
    """The line as JSON, or None when it is not JSON (invalid UTF-8 or syntax)."""
    try:
        return json.loads(line.decode("utf-8"), object_pairs_hook=_Members)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def read_line(line: bytes, where: str, partitions: int | None = None) -> FramedRecord | RawLine:
    """Classify and check one non-empty line (``where`` is ``FILE:LINE``).

    ``partitions``: the configuration's partition count; a framed record naming
    a partition outside it is refused (None: only non-negative is required).
    Raises RecordsError for an oversized or too deeply nested line and for a
    framed line that is not a correct framed record.
    """
    if len(line) > MAX_LINE_BYTES:
        msg = f"{where}: line of {len(line)} bytes is above the {MAX_LINE_BYTES} byte limit"
        raise RecordsError(msg)
    if not _nesting_ok(line):
        msg = f"{where}: JSON nests deeper than {MAX_LINE_DEPTH} levels"
        raise RecordsError(msg)
    obj = _parse(line)
    if not isinstance(obj, dict) or "txn_id" in obj or not FRAMING_MEMBERS.intersection(obj):
        return RawLine(line, where)
    return _framed(obj, where, partitions)


def _framed(obj: dict[str, Any], where: str, partitions: int | None) -> FramedRecord:
    repeated = getattr(obj, "repeated", None)
    if repeated is not None:
        msg = f"{where}: member {repeated[:64]!r} appears more than once"
        raise RecordsError(msg)
    extra = set(obj) - FRAMING_MEMBERS
    if extra:
        msg = f"{where}: unknown member {sorted(extra)[0][:64]!r}"
        raise RecordsError(msg)
    p, o = obj.get("partition"), obj.get("offset")
    if type(p) is not int or type(o) is not int or p < 0 or o < 0:
        msg = f"{where}: partition and offset must be non-negative integers"
        raise RecordsError(msg)
    if o > MAX_OFFSET:
        msg = f"{where}: offset {o} is above the largest Kafka offset {MAX_OFFSET}"
        raise RecordsError(msg)
    if partitions is not None and p >= partitions:
        msg = f"{where}: partition {p} outside 0..{partitions - 1} of the configuration"
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
    return FramedRecord(p, o, None if k is None else _text_bytes(k), value, where)


def _not_framed(where: str) -> str:
    return (
        f"{where}: not a framed record (one"
        ' {"partition","offset","key","value"|"value_b64"} object per line)'
    )


@dataclass(slots=True)
class InputReader:
    """Reads the lines of one or more input files, file by file, in order.

    Every check that can be made line by line is made as lines arrive, so the
    first bad line ends the reading. ``framed()`` and ``raw()`` give the result.
    """

    partitions: int | None
    """The configuration's partition count (None: any non-negative partition)."""
    framed_records: list[FramedRecord] = field(default_factory=list)
    raw_lines: list[RawLine] = field(default_factory=list)

    def add_file(self, name: str, lines: Iterable[bytes]) -> None:
        """Read one file's lines.

        ``lines``: the file cut at ``\\n`` (``\\r\\n`` and a lone ``\\r`` also end a
        line). A reader that stops a line at ``CHUNK_BYTES`` hands over a chunk
        longer than any allowed line, which is refused here.
        """
        first_framed: str | None = None
        first_raw: str | None = None
        n = 0
        for chunk in lines:
            if len(chunk) >= CHUNK_BYTES:
                msg = f"{name}:{n + 1}: line is above the {MAX_LINE_BYTES} byte limit"
                raise RecordsError(msg)
            for line in chunk.splitlines() or [b""]:
                n += 1
                if not line.strip():
                    continue
                where = f"{name}:{n}"
                got = read_line(line, where, self.partitions)
                if isinstance(got, RawLine):
                    if first_framed is not None:
                        msg = (
                            f"{_not_framed(where)}; {first_framed} is framed and a file holds"
                            " framed records or raw values, not both"
                        )
                        raise RecordsError(msg)
                    first_raw = first_raw or where
                    self.raw_lines.append(got)
                else:
                    if first_raw is not None:
                        msg = (
                            f"{where}: a framed record in a file of raw values ({first_raw} is"
                            " one); a file holds framed records or raw values, not both"
                        )
                        raise RecordsError(msg)
                    first_framed = first_framed or where
                    self.framed_records.append(got)

    def framed(self) -> list[FramedRecord]:
        """Framed records by partition and offset; a repeated (partition, offset) is refused."""
        out = sorted(self.framed_records, key=lambda f: (f.partition, f.offset))
        for a, b in zip(out, out[1:], strict=False):
            if (a.partition, a.offset) == (b.partition, b.offset):
                first, second = sorted((a.where, b.where), key=_position)
                msg = f"{second}: partition {b.partition} has offset {b.offset} twice (also at {first})"
                raise RecordsError(msg)
        return out

    def raw(self) -> list[RawLine]:
        return list(self.raw_lines)


def _position(where: str) -> tuple[str, int]:
    name, _, line = where.rpartition(":")
    return name, int(line) if line.isdigit() else 0


def framed_input(reader: InputReader, source: str) -> dict[int, list[Record]]:
    """What ``amends compute`` computes: framed records only, per partition in offset order."""
    if reader.raw_lines:
        first = reader.raw_lines[0].where
        msg = (
            f"{_not_framed(first)}; raw source values are sent by `amends load`,"
            " `amends compute` needs framed records"
        )
        raise RecordsError(msg)
    by_p: dict[int, list[Record]] = {p: [] for p in range(reader.partitions or 0)}
    for fr in reader.framed():
        by_p.setdefault(fr.partition, []).append(fr.record(source))
    return by_p


def encode_line(r: Record) -> str:
    """Framed line for a record (value as text when it is valid UTF-8, else base64).

    Keys are text in this format: a key that is not UTF-8 cannot be framed here,
    except lone surrogates, which are written as ``\\u`` escapes (read back by
    ``read_line`` with ``surrogatepass``).
    """
    from amends_core.ledger import compact_json

    obj: dict[str, object] = {"partition": r.coords.partition, "offset": r.coords.offset}
    obj["key"] = None if r.key is None else r.key.decode("utf-8", "surrogatepass")
    try:
        obj["value"] = r.value.decode("utf-8")
    except UnicodeDecodeError:
        obj["value_b64"] = base64.b64encode(r.value).decode("ascii")
    line = compact_json(obj)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in the key: escape it
        line = json.dumps(obj, separators=(",", ":"), ensure_ascii=True)
    return line
