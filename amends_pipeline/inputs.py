"""The files a user hands amends: the configuration and the expectations of a verification.

Read by the commands and by the Dagster definitions alike, so it sits below both: a
problem with a file is one line naming the file (or the field at fault) as a UsageError.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from amends_core import wire
from amends_core.ledger import Config, ConfigError, Conflict, RejectReason, StockKey
from amends_core.result import RejectionRef
from amends_core.verify import SkipRef
from amends_pipeline.errors import UsageError


def read_bytes(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        msg = f"cannot read {what} {str(path)!r}: {e.strerror or e}"
        raise UsageError(msg) from None


def load_config(path: str | Path) -> Config:
    try:
        return wire.decode_config(read_bytes(path, "configuration"))
    except ConfigError as e:
        msg = f"invalid configuration {str(path)!r}: {e}"
        raise UsageError(msg) from None


EXPECT_FORMAT = (
    '{"rejections": [{"partition", "offset", "reason"}],'
    ' "conflicts": [{"item", "location", "txn_id", "revision"}]}'
)


class ExpectationsError(ValueError):
    """An expectations document is unusable; the message names the field at fault."""


class Expectations(NamedTuple):
    """The manifests of an expectations file: what PASS_WITH_EXCLUSIONS must list exactly."""

    rejections: list[RejectionRef]
    conflicts: list[Conflict]
    skips: list[SkipRef]


def load_expectations(path: str | None) -> Expectations:
    if path is None:
        return Expectations([], [], [])
    raw = read_bytes(path, "expectations file")
    try:
        return parse_expectation_file(raw)
    except ExpectationsError as e:
        msg = f"expectations file {path!r}: {e}"
        raise UsageError(msg) from None


def parse_expectation_file(raw: bytes) -> Expectations:
    """Rejection, conflict and operator-skip manifests (``"skips": [{"partition", "offset"}]``).

    Raises ExpectationsError with one line naming the field at fault and where.
    """
    rej, con = parse_expectations(raw)
    doc = json.loads(raw.decode("utf-8-sig"))  # parse_expectations vouched for it
    skips = [
        SkipRef(_natural(e, "partition", where), _natural(e, "offset", where))
        for where, e in _entries(doc, "skips")
    ]
    return Expectations(rej, con, skips)


def parse_expectations(raw: bytes) -> tuple[list[RejectionRef], list[Conflict]]:
    """Rejection and conflict manifests from an expectations document.

    Raises ExpectationsError with one line naming the field at fault and where.
    """
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        msg = f"not UTF-8 text: byte {e.start}: {e.reason}"
        raise ExpectationsError(msg) from None
    except json.JSONDecodeError as e:
        msg = f"not JSON: line {e.lineno} column {e.colno}: {e.msg}"
        raise ExpectationsError(msg) from None
    if not isinstance(doc, dict):
        msg = f"the document is {_kind(doc)}; expected an object {EXPECT_FORMAT}"
        raise ExpectationsError(msg)
    rej = [
        RejectionRef(
            _natural(r, "partition", where), _natural(r, "offset", where), _reason(r, where)
        )
        for where, r in _entries(doc, "rejections")
    ]
    con = [
        Conflict(
            StockKey(_string(c, "item", where), _string(c, "location", where)),
            _string(c, "txn_id", where),
            _integer(c, "revision", where),
        )
        for where, c in _entries(doc, "conflicts")
    ]
    return rej, con


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _entries(doc: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    entries = doc.get(name, [])
    if not isinstance(entries, list):
        msg = f"{name} is {_kind(entries)}; expected a list"
        raise ExpectationsError(msg)
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            msg = f"{name}[{i}] is {_kind(e)}; expected an object"
            raise ExpectationsError(msg)
        out.append((f"{name}[{i}]", e))
    return out


def _field(entry: dict[str, Any], name: str, where: str) -> Any:
    if name not in entry:
        msg = f'{where} has no "{name}"'
        raise ExpectationsError(msg)
    return entry[name]


def _integer(entry: dict[str, Any], name: str, where: str) -> int:
    value = _field(entry, name, where)
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{where}.{name}: {_show(value)} is not an integer"
        raise ExpectationsError(msg)
    return value


def _natural(entry: dict[str, Any], name: str, where: str) -> int:
    value = _integer(entry, name, where)
    if value < 0:
        msg = f"{where}.{name}: {value} is negative"
        raise ExpectationsError(msg)
    return value


def _string(entry: dict[str, Any], name: str, where: str) -> str:
    value = _field(entry, name, where)
    if not isinstance(value, str):
        msg = f"{where}.{name}: {_show(value)} is not a string"
        raise ExpectationsError(msg)
    return value


def _reason(entry: dict[str, Any], where: str) -> RejectReason:
    value = _field(entry, "reason", where)
    try:
        return RejectReason(value)
    except ValueError:
        allowed = ", ".join(r.value for r in RejectReason)
        msg = f"{where}.reason: {_show(value)} is not one of {allowed}"
        raise ExpectationsError(msg) from None


def _show(value: object, limit: int = 60) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


