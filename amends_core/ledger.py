"""Ledger values shared by every path: keys, transactions, configuration, outputs.

Everything here is an immutable value. Nothing in this module performs I/O,
reads a clock or draws random numbers.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _json_string
from typing import Any, TypeVar

from amends_core import limits, timefmt
from amends_core.memo import remember

CONFIG_SCHEMA_VERSION = 1
"""The configuration document format this code reads."""
ENVELOPE_SCHEMA_VERSION = 2
"""The output envelope format this code writes.

Version 2 added ``reason_count`` to key-status payloads and bounds their
``reasons`` to the first ``limits.MAX_STATUS_REASONS``; the view still accepts
version 1 envelopes (every reference, no count).
"""
SCHEMA_VERSION = ENVELOPE_SCHEMA_VERSION
"""The envelope schema version (older name, kept for callers)."""
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def in_int64(value: int) -> bool:
    """True when ``value`` fits a signed 64-bit integer."""
    return INT64_MIN <= value <= INT64_MAX


# ---------------------------------------------------------------- cheaper frozen values

_T = TypeVar("_T")

HASH_FIELD = "_hash"
"""Name of the cached-hash field (see ``fast_init``)."""


def fast_init(cls: type[_T]) -> type[_T]:
    """Give the frozen, slotted dataclass ``cls`` an ``__init__`` that stores through slot descriptors.

    A frozen dataclass's generated ``__init__`` stores each field with
    ``object.__setattr__`` (its own ``__setattr__`` refuses), about 0.1 µs a
    field, and the worker builds several such values per record. This one stores
    each field through its slot's descriptor, about twice as fast, and leaves
    everything else as the dataclass made it: the same parameters and defaults,
    ``__post_init__`` (called last), equality, ordering, ``replace``, and
    instances that still refuse assignment.

    A class may also keep its hash: a field ``HASH_FIELD`` declared with
    ``field(init=False, repr=False, compare=False)`` is set to the hash the
    dataclass would compute (that of the tuple of the compared fields), for
    values hashed many times per record (dictionary keys). Such a class
    defines ``__hash__`` to return it and ``__reduce__`` to rebuild from the
    other fields, so the cached value, which depends on the process's string
    hash seed, is never pickled or copied into another process.

    Fields with a default factory, keyword-only or other ``init=False`` fields
    raise TypeError when the class is defined.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        msg = f"fast_init needs a frozen, slotted dataclass, not {cls.__qualname__}"
        raise TypeError(msg)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names: dict[str, Any] = {}
    args: list[str] = []
    body: list[str] = []
    hashed = False
    for f in fields:
        setter = f"_set_{f.name}"
        names[setter] = cls.__dict__[f.name].__set__
        if f.name == HASH_FIELD and not f.init and not f.compare:
            hashed = True
            continue
        if not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING:
            msg = f"fast_init cannot build field {f.name!r} of {cls.__qualname__}"
            raise TypeError(msg)
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            names[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
        body.append(f"    _set_{f.name}(__dataclass_self__, {f.name})")
    if hashed:
        compared = [f.name for f in fields if f.compare]
        if "__hash__" not in cls.__dict__ or "__reduce__" not in cls.__dict__:
            msg = f"{cls.__qualname__} caches its hash: it must define __hash__ and __reduce__"
            raise TypeError(msg)
        names["_hash_of"] = hash
        fields_tuple = "".join(n + ", " for n in compared)
        body.append(f"    _set_{HASH_FIELD}(__dataclass_self__, _hash_of(({fields_tuple})))")
    if hasattr(cls, "__post_init__"):
        body.append("    __dataclass_self__.__post_init__()")
    head = f"def __init__(__dataclass_self__, {', '.join(args)}) -> None:\n"
    source = head + "\n".join(body or ["    pass"])
    exec(source, names)  # generated from the field names, as dataclasses does itself
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def printable(text: str) -> str:
    """``text`` as it is when every character is printable, else quoted with escapes (repr):
    how an identifier from the data is shown to a person."""
    return text if text.isprintable() else repr(text)


def compact_json(value: Any) -> str:
    """Canonical compact JSON text (no whitespace, non-ASCII kept as is)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@fast_init
@dataclass(frozen=True, order=True, slots=True)
class StockKey:
    """One item at one location; the unit of trust and of business history."""

    item: str
    location: str
    _hash: int = field(init=False, repr=False, compare=False)
    """``hash((item, location))``, computed once: keys are hashed several times per record."""

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[StockKey], tuple[str, str]]:
        return StockKey, (self.item, self.location)  # the hash is recomputed, never pickled

    def transport_key(self) -> bytes:
        """The Kafka message key: UTF-8 of the compact JSON array ``["ITEM","LOCATION"]``."""
        return compact_json([self.item, self.location]).encode("utf-8")

    def to_json(self) -> dict[str, str]:
        return {"item": self.item, "location": self.location}


class Kind(enum.StrEnum):
    NEW = "NEW"
    AMEND = "AMEND"
    CANCEL = "CANCEL"


KINDS = frozenset(k.value for k in Kind)


@fast_init
@dataclass(frozen=True, slots=True)
class Transaction:
    """A decoded source assertion: a complete replacement value for one identity."""

    txn_id: str
    revision: int
    kind: str
    """Raw kind text; business validation rejects anything outside NEW/AMEND/CANCEL."""
    stock_key: StockKey
    valid_ns: int
    """Valid instant as integer nanoseconds since 1970-01-01T00:00:00Z (UTC-normalised)."""
    qty: int
    source_ns: int
    """Informational source time, nanoseconds since the epoch; never part of authority."""

    @property
    def canonical(self) -> tuple[str, int, str, int, int]:
        """What canonical equality compares: identity, revision, kind, valid instant, qty.

        The stock key is part of the identity but every candidate of one key state
        shares it, so it is left out here; source time and coordinates never count.
        """
        return (self.txn_id, self.revision, self.kind, self.valid_ns, self.qty)

    @property
    def day(self) -> int:
        """UTC calendar day of the valid instant, as days since 1970-01-01."""
        return self.valid_ns // timefmt.NS_PER_DAY

    @property
    def active(self) -> bool:
        return self.kind != Kind.CANCEL


def canonical_equal(a: Transaction, b: Transaction) -> bool:
    """Canonical equality: same identity, revision, kind, UTC valid instant and quantity."""
    return a.stock_key == b.stock_key and a.canonical == b.canonical


@fast_init
@dataclass(frozen=True, order=True, slots=True)
class Coordinates:
    """Where a record was delivered: source incarnation, partition and offset."""

    source: str
    partition: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "partition": self.partition, "offset": self.offset}


@fast_init
@dataclass(frozen=True, slots=True)
class Record:
    """A raw source record exactly as delivered; decoding happens later."""

    value: bytes
    key: bytes | None
    """Raw transport key bytes; None when the message carried no key."""
    coords: Coordinates
    reserved_header: bool = False
    """The message carried the header reserved for the pipeline's own source marker
    without being the marker its namespace recorded, or headers the client could not
    read (which might hide that header); it is rejected (RESERVED_HEADER)."""


class RejectReason(enum.StrEnum):
    """Rejection codes, listed in the order in which they are evaluated."""

    RESERVED_HEADER = "RESERVED_HEADER"
    MALFORMED = "MALFORMED"
    IDENTITY = "IDENTITY"
    REVISION = "REVISION"
    KIND = "KIND"
    CANCEL_QUANTITY = "CANCEL_QUANTITY"
    VALID_TIME = "VALID_TIME"
    UNKNOWN_KEY = "UNKNOWN_KEY"
    KEY_MISMATCH = "KEY_MISMATCH"
    ROUTING = "ROUTING"


@fast_init
@dataclass(frozen=True, slots=True)
class Rejection:
    """A raw record that was not accepted, with the first rule it broke."""

    record: Record
    reason: RejectReason
    detail: str = field(default="", compare=False)
    """Human-readable explanation; informational, never compared."""


@fast_init
@dataclass(frozen=True, order=True, slots=True)
class ConflictRef:
    """A reason reference inside one key: distinct candidates at this revision."""

    txn_id: str
    revision: int

    def to_json(self) -> dict[str, Any]:
        return {"txn_id": self.txn_id, "revision": self.revision}


@dataclass(frozen=True, order=True, slots=True)
class Conflict:
    """Distinct canonical candidates were seen for (key, txn_id) at this revision."""

    key: StockKey
    txn_id: str
    revision: int

    @property
    def ref(self) -> ConflictRef:
        return ConflictRef(self.txn_id, self.revision)


def _name_problem(text: str, max_bytes: int) -> str | None:
    """Why a configured name breaks its length limit (``amends_core.limits``), or None."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return f"is {size} bytes, above the {max_bytes} byte limit"
    return None


def _key_name(key: StockKey) -> str:
    """How a configuration problem names a stock key (its JSON form)."""
    return compact_json(key.to_json())


class ConfigError(ValueError):
    """The configuration cannot be used; the message says why in one line."""


@dataclass(frozen=True, slots=True)
class KeyConfig:
    key: StockKey
    opening_balance: int
    """Stock immediately before the origin; not an event, creates no row."""
    reorder_threshold: int
    partition: int


@dataclass(frozen=True, slots=True)
class Config:
    """The fixed interpretation of one namespace."""

    schema_version: int
    namespace: str
    source_incarnation: str
    partitions: int
    origin_ns: int
    """Ledger origin; valid instants before it are rejected (VALID_TIME)."""
    keys: tuple[KeyConfig, ...]
    _index: dict[StockKey, KeyConfig] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    _digest: list[str] = field(default_factory=list, init=False, repr=False, compare=False, hash=False)
    """Memo of ``digest()``: guards compare it on every record."""
    _usable: list[bool] = field(default_factory=list, init=False, repr=False, compare=False, hash=False)
    """Memo of a ``validate`` that passed: every store and every oracle call checks the
    configuration, and a check reads every key."""

    def __post_init__(self) -> None:
        index = {kc.key: kc for kc in self.keys}
        object.__setattr__(self, "_index", index)

    def validate(self) -> Config:
        """Raise ConfigError naming the first problem; return self when usable."""
        if self._usable:
            return self
        msg = self.problem()
        if msg is not None:
            raise ConfigError(msg)
        self._usable.append(True)
        return self

    def problem(self) -> str | None:
        """The first reason this configuration is unusable, or None."""
        if self.schema_version != CONFIG_SCHEMA_VERSION:
            return (
                f"unsupported schema_version {self.schema_version!r};"
                f" expected {CONFIG_SCHEMA_VERSION}"
            )
        if not self.namespace:
            return "namespace must be a non-empty string"
        if not self.source_incarnation:
            return "source_incarnation must be a non-empty string"
        for what, text in (("namespace", self.namespace), ("source_incarnation", self.source_incarnation)):
            problem = _name_problem(text, limits.MAX_NAME_BYTES)
            if problem is not None:
                return f"{what} {problem}"
        if not 1 <= self.partitions <= 65536:
            return f"partitions must be between 1 and 65536, got {self.partitions}"
        if not self.keys:
            return "keys must list at least one stock key"
        seen: set[StockKey] = set()
        for kc in self.keys:
            k = kc.key
            if not k.item or not k.location:
                return f"stock key {_key_name(k)} has an empty member"
            for what, text in (("item", k.item), ("location", k.location)):
                problem = _name_problem(text, limits.MAX_ID_BYTES)
                if problem is not None:
                    return f"{what} of stock key {_key_name(k)[:80]} {problem}"
            if k in seen:
                return f"duplicate stock key {_key_name(k)}"
            seen.add(k)
            if not 0 <= kc.partition < self.partitions:
                return (
                    f"stock key {_key_name(k)} maps to partition {kc.partition},"
                    f" outside 0..{self.partitions - 1}"
                )
            if not in_int64(kc.opening_balance) or not in_int64(kc.reorder_threshold):
                return f"opening_balance or reorder_threshold of {_key_name(k)} is outside signed 64-bit"
        if not timefmt.day_in_range(self.origin_ns // timefmt.NS_PER_DAY):
            return "origin is outside the supported calendar range (years 1-9999)"
        return None

    def key_config(self, key: StockKey) -> KeyConfig | None:
        return self._index.get(key)

    def normalised(self) -> dict[str, Any]:
        """The configuration as canonical JSON data: UTC origin, keys sorted."""
        return {
            "schema_version": self.schema_version,
            "namespace": self.namespace,
            "source_incarnation": self.source_incarnation,
            "partitions": self.partitions,
            "origin": timefmt.format_instant(self.origin_ns),
            "keys": [
                {
                    "item": kc.key.item,
                    "location": kc.key.location,
                    "opening_balance": kc.opening_balance,
                    "reorder_threshold": kc.reorder_threshold,
                    "partition": kc.partition,
                }
                for kc in sorted(self.keys, key=lambda kc: kc.key)
            ],
        }

    def digest(self) -> str:
        """SHA-256 over the normalised configuration: an identity check, not a signature."""
        if not self._digest:
            text = compact_json(self.normalised()).encode("utf-8")
            self._digest.append(hashlib.sha256(text).hexdigest())
        return self._digest[0]

    def with_namespace(self, namespace: str) -> Config:
        return Config(
            self.schema_version,
            namespace,
            self.source_incarnation,
            self.partitions,
            self.origin_ns,
            self.keys,
        ).validate()


class Family(enum.StrEnum):
    BALANCE = "balance"
    ALERT = "alert"
    STATUS = "key-status"


class MessageType(enum.StrEnum):
    BALANCE_STATED = "BalanceStated"
    BALANCE_RETRACTED = "BalanceRetracted"
    ALERT_RAISED = "AlertRaised"
    ALERT_RETRACTED = "AlertRetracted"
    KEY_STATUS_STATED = "KeyStatusStated"


MESSAGE_FAMILY: dict[MessageType, Family] = {
    MessageType.BALANCE_STATED: Family.BALANCE,
    MessageType.BALANCE_RETRACTED: Family.BALANCE,
    MessageType.ALERT_RAISED: Family.ALERT,
    MessageType.ALERT_RETRACTED: Family.ALERT,
    MessageType.KEY_STATUS_STATED: Family.STATUS,
}


class Status(enum.StrEnum):
    READY = "READY"
    BLOCKED = "BLOCKED"


def output_id_text(namespace: str, family: str, item: str, location: str, day: str | None) -> str:
    """``compact_json([namespace, family, item, location, day])`` written directly.

    The same C string encoder ``json.dumps(..., ensure_ascii=False)`` applies to
    each string, joined the way ``compact_json`` joins a flat array: equal text,
    about a third of the time (every output record's key and view row is one).
    """
    j = _json_string
    return f"[{j(namespace)},{j(family)},{j(item)},{j(location)},{'null' if day is None else j(day)}]"


@fast_init
@dataclass(frozen=True, slots=True)
class OutputID:
    """Identity of one derived fact: (namespace, family, stock key, day).

    Key-status outputs have no day. ``encoded`` is a JSON tuple, so separators
    inside names can never make two identities collide.
    """

    namespace: str
    family: Family
    key: StockKey
    day: int | None
    """UTC day as days since 1970-01-01; None for key status."""
    _hash: int = field(init=False, repr=False, compare=False)
    """The dataclass hash of the four fields, computed once: output IDs key dictionaries."""

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[OutputID], tuple[str, Family, StockKey, int | None]]:
        return OutputID, (self.namespace, self.family, self.key, self.day)  # hash recomputed

    @property
    def encoded(self) -> str:
        day = None if self.day is None else timefmt.format_day(self.day)
        k = self.key
        # The member is its own value (a StrEnum): ``.value`` would only add a descriptor call.
        return output_id_text(self.namespace, self.family, k.item, k.location, day)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "family": self.family.value,
            "stock_key": self.key.to_json(),
            "day": None if self.day is None else timefmt.format_day(self.day),
        }


@fast_init
@dataclass(frozen=True, slots=True)
class Payload:
    """Business content of an envelope; ``present=False`` is a withdrawal.

    Balance: close. Alert: threshold and close. Key status: status, the first
    ``limits.MAX_STATUS_REASONS`` current conflict references (sorted) and their
    total number.
    """

    present: bool
    close: int | None = None
    threshold: int | None = None
    status: Status | None = None
    reasons: tuple[ConflictRef, ...] = ()
    reason_count: int = 0
    """Key status only: how many current conflict references exist (``reasons``
    may carry fewer). Never below ``len(reasons)``: a smaller value (such as
    the default) is raised to it, so a payload built from every reference
    needs no count."""

    def __post_init__(self) -> None:
        if self.status is not None and self.reason_count < len(self.reasons):
            object.__setattr__(self, "reason_count", len(self.reasons))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"present": self.present}
        if self.close is not None and self.threshold is not None:
            out["threshold"] = self.threshold
        if self.close is not None:
            out["close"] = self.close
        if self.status is not None:
            out["status"] = self.status.value
            out["reasons"] = [r.to_json() for r in self.reasons]
            out["reason_count"] = self.reason_count
        return out


@fast_init
@dataclass(frozen=True, slots=True)
class Cause:
    """Which source record triggered an envelope (attribution, not a dependency graph)."""

    source: str
    partition: int
    offset: int
    txn_id: str
    revision: int

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "partition": self.partition,
            "offset": self.offset,
            "txn_id": self.txn_id,
            "revision": self.revision,
        }


@fast_init
@dataclass(frozen=True, slots=True)
class Envelope:
    """One versioned output message. ``==`` is whole-envelope equality."""

    schema_version: int
    output_id: OutputID
    version: int
    type: MessageType
    payload: Payload
    cause: Cause

    def to_json(self) -> dict[str, Any]:
        payload = self.payload.to_json()
        if self.schema_version < 2:
            payload.pop("reason_count", None)  # version 1 had no count
        return {
            "schema_version": self.schema_version,
            "output_id": self.output_id.to_json(),
            "version": self.version,
            "type": self.type.value,
            "payload": payload,
            "cause": self.cause.to_json(),
        }

    def to_bytes(self) -> bytes:
        """The exact bytes that are stored in the outbox and published.

        ``compact_json(self.to_json())`` in UTF-8. Envelopes whose fields have exactly
        the expected types are written directly (``_envelope_text``, the same bytes
        without the intermediate dictionaries); anything else takes the general route.
        """
        text = _envelope_text(self)
        if text is None:
            text = compact_json(self.to_json())
        return text.encode("utf-8")


_int_text = int.__repr__
"""How ``json`` writes an integer (``int.__repr__``, also for subclasses)."""


_heads: dict[tuple[int, str, Family], str] = {}
"""An envelope's text up to its stock key, per schema version, namespace and family."""
_key_texts: dict[StockKey, str] = {}
"""An output ID's stock key member, per key, up to the day's value."""
_TEXTS_REMEMBERED = 1 << 14


def _head_text(schema_version: int, namespace: str, family: Family) -> str:
    text = (
        '{"schema_version":' + _int_text(schema_version)
        + ',"output_id":{"namespace":' + _json_string(namespace) + ',"family":' + _json_string(family)
    )
    return remember(_heads, (schema_version, namespace, family), text, _TEXTS_REMEMBERED)


def _key_text(k: StockKey) -> str:
    text = f',"stock_key":{{"item":{_json_string(k.item)},"location":{_json_string(k.location)}}},"day":'
    return remember(_key_texts, k, text, _TEXTS_REMEMBERED)


def _envelope_text(env: Envelope) -> str | None:
    """``compact_json(env.to_json())`` written directly, or None to use the general route.

    Only for exact types: ``str`` for text, ``int`` for numbers, ``bool`` for
    ``present``, the enums for family, type and status, ``None`` or ``int`` for the
    optional members. Strings are escaped by the function ``json.dumps`` uses with
    ``ensure_ascii=False`` (the enums are ``StrEnum``: their text is their value),
    members follow ``to_json``'s order, so the text is the same character for
    character (tests/unit/test_envelope_bytes.py compares both). The parts that
    repeat from envelope to envelope (up to the family, the stock key member and
    the day) are written once and remembered, a bounded number of each.
    """
    oid, p, c = env.output_id, env.payload, env.cause
    k = oid.key
    day = oid.day
    if not (
        type(env.schema_version) is int and type(env.version) is int and type(oid.namespace) is str
        and type(oid.family) is Family and type(k.item) is str and type(k.location) is str
        and (day is None or type(day) is int) and type(env.type) is MessageType
        and type(p.present) is bool and (p.close is None or type(p.close) is int)
        and (p.threshold is None or type(p.threshold) is int)
        and (p.status is None or type(p.status) is Status)
        and type(c.source) is str and type(c.partition) is int and type(c.offset) is int
        and type(c.txn_id) is str and type(c.revision) is int
    ):
        return None
    payload = '{"present":true' if p.present else '{"present":false'
    if p.close is not None:
        if p.threshold is not None:
            payload = f'{payload},"threshold":{p.threshold},"close":{p.close}'
        else:
            payload = f'{payload},"close":{p.close}'
    if p.status is not None:
        refs = []
        for r in p.reasons:
            if type(r) is not ConflictRef or type(r.txn_id) is not str or type(r.revision) is not int:
                return None
            refs.append(f'{{"txn_id":{_json_string(r.txn_id)},"revision":{r.revision}}}')
        payload = f'{payload},"status":{_json_string(p.status)},"reasons":[{",".join(refs)}]'
        if env.schema_version >= 2:
            if type(p.reason_count) is not int:
                return None
            payload = f'{payload},"reason_count":{p.reason_count}'
    head = _heads.get((env.schema_version, oid.namespace, oid.family))
    if head is None:
        head = _head_text(env.schema_version, oid.namespace, oid.family)
    key_text = _key_texts.get(k)
    if key_text is None:
        key_text = _key_text(k)
    day_text = "null" if day is None else f'"{timefmt.format_day(day)}"'  # digits and dashes only
    # One f-string builds the text at once; an exact int formats as int.__repr__, as json writes it.
    return (
        f'{head}{key_text}{day_text}'
        f'}},"version":{env.version},"type":{_json_string(env.type)},"payload":{payload}'
        f'}},"cause":{{"source":{_json_string(c.source)},"partition":{c.partition}'
        f',"offset":{c.offset},"txn_id":{_json_string(c.txn_id)},"revision":{c.revision}}}}}'
    )


@fast_init
@dataclass(frozen=True, slots=True)
class BalanceRow:
    day: int
    close: int


@fast_init
@dataclass(frozen=True, slots=True)
class AlertRow:
    day: int
    threshold: int
    close: int


@dataclass(frozen=True, slots=True)
class Projection:
    """Computed business view of one stock key (no output versions)."""

    key: StockKey
    status: Status
    reasons: tuple[ConflictRef, ...]
    balances: tuple[BalanceRow, ...]
    alerts: tuple[AlertRow, ...]

    @staticmethod
    def untouched(key: StockKey) -> Projection:
        return Projection(key, Status.READY, (), (), ())

    def to_json(self) -> dict[str, Any]:
        """The per-key shape of the ``amends compute`` contract."""
        return {
            "item": self.key.item,
            "location": self.key.location,
            "status": self.status.value,
            "reasons": [r.to_json() for r in self.reasons],
            "balances": [
                {"day": timefmt.format_day(b.day), "close": b.close} for b in self.balances
            ],
            "alerts": [
                {"day": timefmt.format_day(a.day), "threshold": a.threshold, "close": a.close}
                for a in self.alerts
            ],
        }


class CloseOutOfRange(ArithmeticError):
    """A daily close left signed 64-bit: an operation error, never a rejection."""

    def __init__(self, key: StockKey, day: int, value: int) -> None:
        self.key = key
        self.day = day
        self.value = value
        super().__init__(
            f"daily close of stock key {compact_json(key.to_json())} on"
            f" {timefmt.format_day(day)} is {value}, outside signed 64-bit"
        )
