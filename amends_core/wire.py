"""Strict decoding of raw bytes into ledger values.

Every decoder returns either a value or a ``DecodeError`` value; malformed input
never raises across this boundary. The allowlist of failures is explicit: any
other exception escaping ``decode_transaction`` is a defect (the fuzz tests hunt
for them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import msgspec

from amends_core import limits, timefmt
from amends_core.ledger import (
    INT64_MAX,
    INT64_MIN,
    SCHEMA_VERSION,
    Cause,
    Config,
    ConfigError,
    ConflictRef,
    Envelope,
    Family,
    KeyConfig,
    MessageType,
    OutputID,
    Payload,
    Status,
    StockKey,
    Transaction,
    in_int64,
)
from amends_core.memo import remember

MAX_VALUE_BYTES = limits.MAX_VALUE_BYTES
"""Source values above 1 MiB are refused before parsing (see ``amends_core.limits``)."""
MAX_DEPTH = limits.MAX_JSON_DEPTH


@dataclass(frozen=True, slots=True)
class DecodeError:
    """Why bytes could not be decoded; a value, routed to quarantine by callers."""

    message: str


class _Reject(Exception):
    """Internal signal; converted into DecodeError before leaving this module."""


def _pairs_no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            msg = f"duplicate member name {k[:64]!r}"
            raise _Reject(msg)
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    msg = f"non-finite number {name} is not JSON"
    raise _Reject(msg)


def _no_float(text: str) -> Any:
    msg = f"number {text[:32]} is not an integer"
    raise _Reject(msg)


_STRICT = json.JSONDecoder(
    object_pairs_hook=_pairs_no_duplicates, parse_constant=_no_constant, parse_float=_no_float
)
"""The strict JSON parser, built once (``json.loads`` with hooks builds one per call)."""


def _check_text(value: Any, depth: int = 0) -> None:
    """Refuse lone surrogates (from \\uD800 escapes), NUL characters and deep nesting."""
    if depth > MAX_DEPTH:
        msg = "nesting too deep"
        raise _Reject(msg)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            msg = "string contains a lone surrogate"
            raise _Reject(msg) from e
        if "\x00" in value:
            # PostgreSQL text cannot hold NUL; refuse it at the edge instead of failing later.
            msg = "string contains a NUL character"
            raise _Reject(msg)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_text(k, depth + 1)
            _check_text(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_text(v, depth + 1)


def _nesting_ok(text: str) -> bool:
    """Pre-check so a deeply nested document cannot exhaust the recursion limit."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return True  # cannot nest deeper than the number of openers (counted in C)
    depth = 0
    in_str = False
    esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def parse_json_object(raw: bytes, what: str = "value") -> dict[str, Any] | DecodeError:
    """Exactly one JSON object from UTF-8 bytes, with no duplicate member names."""
    if len(raw) > MAX_VALUE_BYTES:
        return DecodeError(f"{what} is {len(raw)} bytes, above the {MAX_VALUE_BYTES} byte limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return DecodeError(f"{what} is not valid UTF-8")
    if text.startswith("\ufeff"):
        return DecodeError(f"{what} starts with a byte order mark")
    if not text.lstrip(" \t\r\n").startswith("{"):
        return DecodeError(f"{what} is not a JSON object")
    if not _nesting_ok(text):
        return DecodeError(f"{what} nests deeper than {MAX_DEPTH}")
    try:
        obj = _STRICT.decode(text)
        if "\\u" in text:
            # Only \u escapes can produce lone surrogates or NUL: raw ones are invalid
            # UTF-8 or unescaped control characters, which the parser already refuses.
            _check_text(obj)
    except _Reject as e:
        return DecodeError(str(e))
    except json.JSONDecodeError as e:
        return DecodeError(f"invalid JSON: {e.msg} at offset {e.pos}")
    except (ValueError, RecursionError) as e:  # e.g. integer digit limit
        return DecodeError(f"invalid JSON: {str(e)[:80]}")
    if not isinstance(obj, dict):
        return DecodeError(f"{what} is not a JSON object")
    return obj


_TXN_FIELDS = ("txn_id", "revision", "kind", "stock_key", "valid_time", "qty", "source_time")
_KEY_FIELDS = ("item", "location")


def _exact_members(obj: dict[str, Any], names: tuple[str, ...], where: str) -> None:
    for k in obj:
        if k not in names:
            msg = f"unknown member {k[:64]!r} in {where}"
            raise _Reject(msg)
    for n in names:
        if n not in obj:
            msg = f"missing member {n!r} in {where}"
            raise _Reject(msg)
        if obj[n] is None:
            msg = f"member {n!r} in {where} is null"
            raise _Reject(msg)


def _string(obj: dict[str, Any], name: str) -> str:
    v = obj[name]
    if not isinstance(v, str):
        msg = f"member {name!r} must be a string"
        raise _Reject(msg)
    return v


def _identifier(obj: dict[str, Any], name: str) -> str:
    """A string member that names something: at most ``limits.MAX_ID_BYTES`` UTF-8 bytes."""
    v = _string(obj, name)
    size = len(v) if v.isascii() else len(v.encode("utf-8", "surrogatepass"))
    if size > limits.MAX_ID_BYTES:
        msg = f"member {name!r} is {size} bytes, above the {limits.MAX_ID_BYTES} byte limit"
        raise _Reject(msg)
    return v


def _int64(obj: dict[str, Any], name: str) -> int:
    v = obj[name]
    if type(v) is not int:
        msg = f"member {name!r} must be an integer"
        raise _Reject(msg)
    if not in_int64(v):
        msg = f"member {name!r} is outside signed 64-bit"
        raise _Reject(msg)
    return v


def _instant(obj: dict[str, Any], name: str) -> int:
    try:
        return timefmt.parse_rfc3339(_string(obj, name))
    except timefmt.TimestampError as e:
        msg = f"member {name!r}: {e}"
        raise _Reject(msg) from e


_S = TypeVar("_S", bound=msgspec.Struct)


_Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
"""An integer member of a fast route's struct: msgspec refuses one outside signed 64-bit."""


class _FastKey(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    item: str
    location: str


class _FastTxn(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    txn_id: str
    revision: _Int64
    kind: str
    stock_key: _FastKey
    valid_time: str
    qty: _Int64
    source_time: str


_FAST = msgspec.json.Decoder(_FastTxn, strict=True)
_FAST_MEMBERS = len(_TXN_FIELDS) + len(_KEY_FIELDS)


def _string_members(struct: type[msgspec.Struct]) -> int:
    return sum(1 for t in struct.__annotations__.values() if t == "str")


_FAST_QUOTES = 2 * (_FAST_MEMBERS + _string_members(_FastTxn) + _string_members(_FastKey))
"""Quote characters in a value msgspec decoded into ``_FastTxn`` without a duplicate member.

With no backslash every string is delimited by exactly two quotes, and quotes
occur nowhere else in JSON. A value that decoded holds every member name once
at least and a string for every ``str`` member (15 strings); each repeated
member adds at least its name, so the count is exactly this number only
without repeats.
"""


_ID_CHARS_FIT = limits.MAX_ID_BYTES // 4
"""Identifiers of at most this many characters fit ``MAX_ID_BYTES`` whatever they hold: UTF-8
needs at most 4 bytes a character."""


def _fits_identifier(v: str) -> bool:
    """``v`` is at most ``MAX_ID_BYTES`` in UTF-8; for a fast route's text (valid UTF-8: no lone
    surrogate), so the usual short identifiers are not counted byte by byte."""
    if len(v) <= _ID_CHARS_FIT:
        return True
    return (len(v) if v.isascii() else len(v.encode("utf-8"))) <= limits.MAX_ID_BYTES


def _plain(raw: bytes, decoder: msgspec.json.Decoder[_S]) -> _S | None:
    """``raw`` decoded into a fast route's struct, or None when it has a backslash, exceeds
    ``MAX_VALUE_BYTES``, is not UTF-8 or does not fit the struct exactly."""
    if b"\\" in raw or len(raw) > MAX_VALUE_BYTES:
        return None
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError:  # ValidationError included
        return None


def _fast_transaction(raw: bytes) -> Transaction | None:
    """The transaction when ``raw`` is plainly well-formed, or None: then the strict route decides.

    Accepts only what the strict route accepts, with the same values: no
    backslash (so no escape can hide a NUL or a surrogate), valid UTF-8, the
    exact members with the right JSON types (msgspec refuses unknown, missing
    and null members, floats, constants and trailing content), no duplicate
    member (msgspec keeps the last of duplicates silently, so the quotes are
    counted: ``_FAST_QUOTES``), signed 64-bit integers, identifiers within their byte limit
    and timestamps that parse. Anything else, including every error, takes
    the strict route, which words the message.
    """
    t = _plain(raw, _FAST)
    if t is None:
        return None
    k = t.stock_key
    if (
        raw.count(b'"') != _FAST_QUOTES
        or not (_fits_identifier(t.txn_id) and _fits_identifier(k.item) and _fits_identifier(k.location))
    ):
        return None
    try:
        valid_ns = timefmt.parse_rfc3339(t.valid_time)
        source_ns = timefmt.parse_rfc3339(t.source_time)
    except timefmt.TimestampError:
        return None
    return Transaction(t.txn_id, t.revision, _KINDS.get(t.kind, t.kind), _stock_key(k.item, k.location),
                       valid_ns, t.qty, source_ns)


_KINDS = {k: k for k in ("NEW", "AMEND", "CANCEL")}
"""One string object per valid kind: every transaction a worker keeps shares it."""
_stock_keys: dict[tuple[str, str], StockKey] = {}
_STOCK_KEYS_REMEMBERED = 1 << 17


def _stock_key(item: str, location: str) -> StockKey:
    """An equal StockKey, shared with earlier transactions of the same key.

    A worker keeps every accepted transaction of its keys in memory; sharing the
    key (and its two strings) instead of one copy per transaction saves about
    170 bytes per record of history. At most 131,072 keys are remembered.
    """
    pair = (item, location)
    sk = _stock_keys.get(pair)
    if sk is None:
        sk = remember(_stock_keys, pair, StockKey(item, location), _STOCK_KEYS_REMEMBERED)
    return sk


def decode_transaction(raw: bytes) -> Transaction | DecodeError:
    """Strictly decode one source value. Shape only; business rules come later.

    Plainly well-formed values take a fast route (``_fast_transaction``); the
    rest, and every error, the strict one (``decode_transaction_strictly``).
    """
    fast = _fast_transaction(raw)
    if fast is not None:
        return fast
    return decode_transaction_strictly(raw)


def decode_transaction_strictly(raw: bytes) -> Transaction | DecodeError:
    """``decode_transaction`` by the strict route alone (what the fast route must agree with)."""
    obj = parse_json_object(raw)
    if isinstance(obj, DecodeError):
        return obj
    try:
        _exact_members(obj, _TXN_FIELDS, "transaction")
        sk = obj["stock_key"]
        if not isinstance(sk, dict):
            msg = "member 'stock_key' must be an object"
            raise _Reject(msg)
        _exact_members(sk, _KEY_FIELDS, "stock_key")
        return Transaction(
            txn_id=_identifier(obj, "txn_id"),
            revision=_int64(obj, "revision"),
            kind=_string(obj, "kind"),
            stock_key=StockKey(_identifier(sk, "item"), _identifier(sk, "location")),
            valid_ns=_instant(obj, "valid_time"),
            qty=_int64(obj, "qty"),
            source_ns=_instant(obj, "source_time"),
        )
    except _Reject as e:
        return DecodeError(str(e))


def encode_transaction(t: Transaction) -> bytes:
    """Canonical source bytes for a transaction (used by generators and fixtures)."""
    from amends_core.ledger import compact_json

    return compact_json(
        {
            "txn_id": t.txn_id,
            "revision": t.revision,
            "kind": t.kind,
            "stock_key": t.stock_key.to_json(),
            "valid_time": timefmt.format_instant(t.valid_ns),
            "qty": t.qty,
            "source_time": timefmt.format_instant(t.source_ns),
        }
    ).encode("utf-8")


_KEYS_REMEMBERED = 4096
_keys_seen: dict[bytes, StockKey | DecodeError] = {}
"""Decoded transport keys (immutable answers of a pure function): a topic carries few distinct
keys, each on many records. Emptied when full, so hostile keys cannot grow it."""


def decode_transport_key(raw: bytes | None) -> StockKey | DecodeError:
    """The Kafka key: a JSON array of exactly two strings, ``[item, location]``."""
    if raw is None:
        return DecodeError("record has no transport key")
    hit = _keys_seen.get(raw)
    if hit is not None:
        return hit
    return remember(_keys_seen, raw, _decode_transport_key(raw), _KEYS_REMEMBERED)


def _decode_transport_key(raw: bytes) -> StockKey | DecodeError:
    if len(raw) > MAX_VALUE_BYTES:
        return DecodeError("transport key is too large")
    try:
        text = raw.decode("utf-8")
        if not _nesting_ok(text):
            return DecodeError("transport key nests too deep")
        arr = _STRICT.decode(text)
        _check_text(arr)
    except UnicodeDecodeError:
        return DecodeError("transport key is not valid UTF-8")
    except (_Reject, ValueError, RecursionError) as e:
        return DecodeError(f"transport key is not JSON: {str(e)[:80]}")
    if (
        not isinstance(arr, list)
        or len(arr) != 2
        or not all(isinstance(x, str) for x in arr)
    ):
        return DecodeError('transport key is not a ["item","location"] array')
    return StockKey(arr[0], arr[1])


# ---------------------------------------------------------------- configuration


_CONFIG_FIELDS = (
    "schema_version", "namespace", "source_incarnation", "partitions", "origin", "keys",
)
_KEYCFG_FIELDS = ("item", "location", "opening_balance", "reorder_threshold", "partition")


def decode_config(raw: bytes) -> Config:
    """Strictly decode and validate a configuration document; raises ConfigError."""
    obj = parse_json_object(raw, "configuration")
    if isinstance(obj, DecodeError):
        raise ConfigError(obj.message)
    try:
        _exact_members(obj, _CONFIG_FIELDS, "configuration")
        keys_raw = obj["keys"]
        if not isinstance(keys_raw, list):
            msg = "member 'keys' must be an array"
            raise _Reject(msg)
        keys = []
        for i, kr in enumerate(keys_raw):
            if not isinstance(kr, dict):
                msg = f"keys[{i}] must be an object"
                raise _Reject(msg)
            _exact_members(kr, _KEYCFG_FIELDS, f"keys[{i}]")
            keys.append(
                KeyConfig(
                    key=StockKey(_string(kr, "item"), _string(kr, "location")),
                    opening_balance=_int64(kr, "opening_balance"),
                    reorder_threshold=_int64(kr, "reorder_threshold"),
                    partition=_int64(kr, "partition"),
                )
            )
        cfg = Config(
            schema_version=_int64(obj, "schema_version"),
            namespace=_string(obj, "namespace"),
            source_incarnation=_string(obj, "source_incarnation"),
            partitions=_int64(obj, "partitions"),
            origin_ns=_instant(obj, "origin"),
            keys=tuple(keys),
        )
    except _Reject as e:
        raise ConfigError(str(e)) from None
    return cfg.validate()


def encode_config(cfg: Config) -> bytes:
    from amends_core.ledger import compact_json

    return compact_json(cfg.normalised()).encode("utf-8")


# ---------------------------------------------------------------- envelopes


_ENV_FIELDS = ("schema_version", "output_id", "version", "type", "payload", "cause")
_OID_FIELDS = ("namespace", "family", "stock_key", "day")
_CAUSE_FIELDS = ("source", "partition", "offset", "txn_id", "revision")
_PAYLOAD_FIELDS: dict[MessageType, tuple[str, ...]] = {
    MessageType.BALANCE_STATED: ("present", "close"),
    MessageType.BALANCE_RETRACTED: ("present",),
    MessageType.ALERT_RAISED: ("present", "threshold", "close"),
    MessageType.ALERT_RETRACTED: ("present",),
    MessageType.KEY_STATUS_STATED: ("present", "status", "reasons", "reason_count"),
}
_V1_STATUS_FIELDS = ("present", "status", "reasons")
"""Schema version 1 key status carried every reference and no count."""


class _FastOutputID(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    namespace: str
    family: str
    stock_key: _FastKey
    day: str | None


class _FastPayload(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    present: bool
    close: _Int64 | msgspec.UnsetType = msgspec.UNSET
    threshold: _Int64 | msgspec.UnsetType = msgspec.UNSET


class _FastCause(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    source: str
    partition: _Int64
    offset: _Int64
    txn_id: str
    revision: _Int64


class _FastEnvelope(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    schema_version: _Int64
    output_id: _FastOutputID
    version: _Int64
    type: str
    payload: _FastPayload
    cause: _FastCause


_FAST_ENVELOPE = msgspec.json.Decoder(_FastEnvelope, strict=True)
_FAST_ENVELOPE_QUOTES = 2 * (
    len(_ENV_FIELDS) + len(_OID_FIELDS) + len(_KEY_FIELDS) + len(_CAUSE_FIELDS)
    + _string_members(_FastEnvelope) + _string_members(_FastOutputID)
    + _string_members(_FastKey) + _string_members(_FastCause)
)
"""Quote characters of a decoded ``_FastEnvelope`` without duplicate members, before
the payload's members and a non-null day are counted (see ``_FAST_QUOTES``)."""
_FAST_SHAPES: dict[str, tuple[MessageType, bool, bool]] = {
    t.value: (t, "close" in shape, "threshold" in shape) for t, shape in _PAYLOAD_FIELDS.items()
    if t is not MessageType.KEY_STATUS_STATED
}
"""The envelope types the fast route decodes, with whether their payload has ``close`` and
``threshold`` (``present`` it always has, and msgspec refuses any other member); key
statuses (lists of references, two schema versions) take the strict route."""
assert all(set(shape) <= {"present", "close", "threshold"} for t, shape in _PAYLOAD_FIELDS.items()
           if t is not MessageType.KEY_STATUS_STATED)
_FAMILIES = {f.value: f for f in Family}


def _fast_envelope(raw: bytes) -> Envelope | None:
    """The envelope when ``raw`` is a plainly well-formed balance or alert envelope, or None.

    None sends ``raw`` to the strict route, which decides and words every
    error. Accepts only what the strict route accepts, with the same values,
    by the same means as ``_fast_transaction``: no backslash, valid UTF-8,
    exact members with the right JSON types (the payload's exactly those of
    its type), no duplicate member (quotes counted), signed 64-bit integers,
    a known family and type and a day that parses.
    """
    e = _plain(raw, _FAST_ENVELOPE)
    if e is None:
        return None
    oid, pl, c = e.output_id, e.payload, e.cause
    shaped = _FAST_SHAPES.get(e.type)
    family = _FAMILIES.get(oid.family)
    if shaped is None or family is None:
        return None
    mtype, has_close, has_threshold = shaped
    close = None if pl.close is msgspec.UNSET else pl.close
    threshold = None if pl.threshold is msgspec.UNSET else pl.threshold
    quotes = _FAST_ENVELOPE_QUOTES + 2 * (1 + has_close + has_threshold + (oid.day is not None))
    if (close is not None) is not has_close or (threshold is not None) is not has_threshold or (
        raw.count(b'"') != quotes
    ):
        return None
    day = None
    if oid.day is not None:
        try:
            day = timefmt.parse_day(oid.day)
        except ValueError:
            return None
    k = oid.stock_key
    # positional arguments in field order (fewer costs per envelope than keywords)
    return Envelope(
        e.schema_version,
        OutputID(oid.namespace, family, _stock_key(k.item, k.location), day),
        e.version,
        mtype,
        Payload(pl.present, close, threshold),
        Cause(c.source, c.partition, c.offset, c.txn_id, c.revision),
    )


def decode_envelope(raw: bytes) -> Envelope | DecodeError:
    """Strictly decode published envelope bytes; shape errors are protocol errors.

    Plainly well-formed balance and alert envelopes take a fast route
    (``_fast_envelope``); the rest, and every error, the strict one
    (``decode_envelope_strictly``).
    """
    fast = _fast_envelope(raw)
    if fast is not None:
        return fast
    return decode_envelope_strictly(raw)


def decode_envelope_strictly(raw: bytes) -> Envelope | DecodeError:
    """``decode_envelope`` by the strict route alone (what the fast route must agree with)."""
    obj = parse_json_object(raw, "envelope")
    if isinstance(obj, DecodeError):
        return obj
    try:
        _exact_members(obj, _ENV_FIELDS, "envelope")
        oid, cause, pl = obj["output_id"], obj["cause"], obj["payload"]
        if not (isinstance(oid, dict) and isinstance(cause, dict) and isinstance(pl, dict)):
            msg = "output_id, payload and cause must be objects"
            raise _Reject(msg)
        for k in oid:
            if k not in _OID_FIELDS:
                msg = f"unknown member {k!r} in output_id"
                raise _Reject(msg)
        for n in _OID_FIELDS:
            if n not in oid:
                msg = f"missing member {n!r} in output_id"
                raise _Reject(msg)
        sk = oid["stock_key"]
        if not isinstance(sk, dict):
            msg = "output_id.stock_key must be an object"
            raise _Reject(msg)
        _exact_members(sk, _KEY_FIELDS, "output_id.stock_key")
        try:
            family = Family(_string(oid, "family"))
            mtype = MessageType(_string(obj, "type"))
        except ValueError as e:
            msg = f"unknown family or type: {e}"
            raise _Reject(msg) from e
        day_raw = oid["day"]
        day: int | None
        if day_raw is None:
            day = None
        elif isinstance(day_raw, str):
            try:
                day = timefmt.parse_day(day_raw)
            except ValueError as e:
                raise _Reject(str(e)) from e
        else:
            msg = "output_id.day must be a string or null"
            raise _Reject(msg)
        _exact_members(cause, _CAUSE_FIELDS, "cause")
        schema_version = _int64(obj, "schema_version")
        shape = _PAYLOAD_FIELDS[mtype]
        if mtype is MessageType.KEY_STATUS_STATED and schema_version == 1:
            shape = _V1_STATUS_FIELDS
        _exact_members(pl, shape, f"{mtype.value} payload")
        present = pl["present"]
        if not isinstance(present, bool):
            msg = "payload.present must be a boolean"
            raise _Reject(msg)
        status = None
        reasons: tuple[ConflictRef, ...] = ()
        reason_count = 0
        if mtype is MessageType.KEY_STATUS_STATED:
            try:
                status = Status(_string(pl, "status"))
            except ValueError as e:
                msg = "payload.status must be READY or BLOCKED"
                raise _Reject(msg) from e
            rr = pl["reasons"]
            if not isinstance(rr, list):
                msg = "payload.reasons must be an array"
                raise _Reject(msg)
            refs = []
            for r in rr:
                if not isinstance(r, dict):
                    msg = "payload.reasons entries must be objects"
                    raise _Reject(msg)
                _exact_members(r, ("txn_id", "revision"), "reason")
                refs.append(ConflictRef(_string(r, "txn_id"), _int64(r, "revision")))
            reasons = tuple(refs)
            if "reason_count" in pl:
                reason_count = _int64(pl, "reason_count")
                if reason_count < len(reasons):
                    msg = "payload.reason_count is below the number of reasons carried"
                    raise _Reject(msg)
            else:
                reason_count = len(reasons)
        payload = Payload(
            present=present,
            close=_int64(pl, "close") if "close" in pl else None,
            threshold=_int64(pl, "threshold") if "threshold" in pl else None,
            status=status,
            reasons=reasons,
            reason_count=reason_count,
        )
        return Envelope(
            schema_version=schema_version,
            output_id=OutputID(
                _string(oid, "namespace"),
                family,
                StockKey(_string(sk, "item"), _string(sk, "location")),
                day,
            ),
            version=_int64(obj, "version"),
            type=mtype,
            payload=payload,
            cause=Cause(
                _string(cause, "source"),
                _int64(cause, "partition"),
                _int64(cause, "offset"),
                _string(cause, "txn_id"),
                _int64(cause, "revision"),
            ),
        )
    except _Reject as e:
        return DecodeError(str(e))


__all__ = [
    "SCHEMA_VERSION",
    "DecodeError",
    "decode_config",
    "decode_envelope",
    "decode_envelope_strictly",
    "decode_transaction",
    "decode_transport_key",
    "encode_config",
    "encode_transaction",
    "parse_json_object",
]
