"""The oracle's own strict decoding route, written apart from ``amends_core.wire``.

Source values are decoded column-wise into a Polars frame. Three layers, each
of which either proves a record well-formed or hands it to the next one:

1. Bulk routes (in Polars), for string contents without escapes or control
   characters and JSON integers. The canonical route: a single anchored
   regular expression over the UTF-8 text matches only the compact layout
   with the seven members in their usual order. The any-order route, for the
   rows left: an anchored expression proves seven members of known names in
   any order, with any JSON whitespace, and one expression per member finds
   its value. Either match is a proof: exactly one object, no unknown,
   missing, duplicate or null members, nothing trailing.
2. Typed structs (msgspec, per record): whatever the bulk routes left
   (escapes, offsets, anything malformed).
   msgspec is strict about types, unknown names (case-sensitive), trailing
   content, invalid UTF-8 and lone surrogates, but silently keeps the last of
   duplicate member names. Without backslashes, a document that decodes into
   the structs has no duplicates exactly when it holds 30 quote characters
   (9 names and 6 string values); otherwise a scanner compares the decoded
   member names of every object.
3. Timestamps for every row are parsed and range-checked in Polars.

Anything the structs refuse is malformed. The agreement of this route with
``wire.decode_transaction`` on acceptance and on decoded values is checked by
fuzz tests; the two share no parsing code.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

import msgspec
import polars as pl

from amends_core import limits, timefmt
from amends_core.ledger import INT64_MAX, INT64_MIN, StockKey, Transaction

MAX_VALUE_BYTES = limits.MAX_VALUE_BYTES
"""Values (and transport keys) above 1 MiB are refused before parsing."""

_QUOTES_IN_A_WELL_FORMED_VALUE = 30
"""9 member names and 6 string values, each opened and closed by one quote."""

_UTF8_SLICE = 65_536
"""Values per UTF-8 validity check (bounds the temporary joined copy)."""

_BULK_CHUNK = 262_144
"""Rows per lazily evaluated slice of the canonical-layout match (parallel slices)."""


@dataclass(frozen=True, slots=True)
class Malformed:
    """Why a value or transport key could not be decoded."""

    message: str


# ---------------------------------------------------------------- garbage collector


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of acyclic objects are made.

    Bulk decoding allocates many small objects; generational collections would
    otherwise rescan the caller's (large) record lists again and again.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# ---------------------------------------------------------------- typed structs

_Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]


class _StockKeyDoc(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    item: str
    location: str


class _TxnDoc(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    txn_id: str
    revision: _Int64
    kind: str
    stock_key: _StockKeyDoc
    valid_time: str
    qty: _Int64
    source_time: str


_txn_decoder = msgspec.json.Decoder(_TxnDoc, strict=True)
_key_decoder = msgspec.json.Decoder(tuple[str, str], strict=True)
_name_decoder = msgspec.json.Decoder(str, strict=True)

_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError)

# ---------------------------------------------------------------- canonical layout

_STRING_BODY = r'[^"\\\x00-\x1f]*'
"""String contents the bulk routes read: no quote, backslash or control character."""
_INTEGER = r"-?(?:0|[1-9][0-9]*)"
"""A JSON integer."""
_STR = rf'"({_STRING_BODY})"'
_INT = rf"({_INTEGER})"
_ZULU = r'"([0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?[Zz])"'
"""An RFC 3339 instant in UTC (``Z``), with or without a fraction: a string that
needs no escapes, with every digit at a fixed position up to the seconds."""
_CANONICAL = (
    r"^\{"
    rf'"txn_id":{_STR},"revision":{_INT},"kind":{_STR},'
    rf'"stock_key":\{{"item":{_STR},"location":{_STR}\}},'
    rf'"valid_time":{_ZULU},"qty":{_INT},"source_time":{_ZULU}'
    r"\}$"
)
_FIELDS = ("txn_id", "revision", "kind", "item", "location", "valid_time", "qty", "source_time")

# ---------------------------------------------------------------- any member order and whitespace

_WS = r"[ \t\n\r]*"
"""JSON's insignificant whitespace (exactly these four characters)."""
_SCALARS = ("txn_id", "revision", "kind", "valid_time", "qty", "source_time")
_VALUE = rf'(?:"{_STRING_BODY}"|{_INTEGER})'
_KEY_MEMBER = rf'"(?:item|location)"{_WS}:{_WS}"{_STRING_BODY}"'
_MEMBER = (
    rf'(?:"(?:{"|".join(_SCALARS)})"{_WS}:{_WS}{_VALUE}'
    rf'|"stock_key"{_WS}:{_WS}\{{{_WS}{_KEY_MEMBER}{_WS},{_WS}{_KEY_MEMBER}{_WS}\}})'
)
_ANY_ORDER = rf"^{_WS}\{{{_WS}{_MEMBER}(?:{_WS},{_WS}{_MEMBER}){{6}}{_WS}\}}{_WS}$"
"""Exactly seven members, each a known name with a string or integer (``stock_key``:
an object of exactly two ``item``/``location`` string members), strings without
escapes or control characters, in any order and with any JSON whitespace.

Strings hold no quote, so a quoted name followed by a colon is always a member
name. Seven member slots holding all seven names (each member found by its
own pattern below, ``item`` and ``location`` only inside ``stock_key``) hold
each exactly once; the two slots of ``stock_key`` likewise. A row matching
this and every member pattern is therefore exactly one object with every
member once and nothing unknown or trailing, as a canonical match is."""
_ID_FIELDS = ("txn_id", "item", "location")
_INT_FIELDS = ("revision", "qty")
_INSTANT_FIELDS = ("valid_time", "source_time")
_MEMBER_PATTERNS = {
    f: rf'"{f}"{_WS}:{_WS}' + (_INT if f in _INT_FIELDS else _ZULU if f in _INSTANT_FIELDS else _STR)
    for f in _FIELDS
}
"""Per member: its name, the colon and its value of the expected type (captured)."""

_RAW_SCHEMA: dict[str, pl.DataType] = {
    "txn_id": pl.String(),
    "revision": pl.Int64(),
    "kind": pl.String(),
    "item": pl.String(),
    "location": pl.String(),
    "valid_time": pl.String(),
    "qty": pl.Int64(),
    "source_time": pl.String(),
}

DECODED_SCHEMA: dict[str, pl.DataType] = {
    "error": pl.String(),
    "txn_id": pl.String(),
    "revision": pl.Int64(),
    "kind": pl.String(),
    "item": pl.String(),
    "location": pl.String(),
    "valid_s": pl.Int64(),
    "valid_nanos": pl.Int64(),
    "qty": pl.Int64(),
    "source_s": pl.Int64(),
    "source_nanos": pl.Int64(),
}
"""Columns of ``decode_values``: ``error`` is null exactly for well-formed values.

Instants are split into UTC seconds since the epoch and a nanosecond part in
``[0, 10**9)``: years 1-9999 in nanoseconds do not fit a signed 64-bit column.
"""


def _utf8_text(values: pl.Series) -> pl.Series:
    """The values as a String column, null where the bytes are not valid UTF-8.

    Polars refuses to cast a column holding any invalid UTF-8 at all. When
    that happens, validity is established a slice at a time: the slice joined
    with newlines decodes exactly when each of its values does (a newline can
    neither finish nor continue a multi-byte sequence).
    """
    try:
        return values.cast(pl.String)  # the common case: everything is valid UTF-8
    except pl.exceptions.ComputeError:
        pass
    bad: list[int] = []
    for start in range(0, len(values), _UTF8_SLICE):
        chunk = values.slice(start, _UTF8_SLICE).to_list()
        try:
            b"\n".join(chunk).decode("utf-8")
        except UnicodeDecodeError:
            for i, v in enumerate(chunk):
                if not v.isascii():
                    try:
                        v.decode("utf-8")
                    except UnicodeDecodeError:
                        bad.append(start + i)
    if not bad:
        return values.cast(pl.String)
    # Polars validates whole buffers, masked slots included: rebuild without them.
    good = pl.repeat(True, len(values), eager=True).scatter(bad, False)
    text = pl.repeat(None, len(values), dtype=pl.String, eager=True).alias("v")
    return text.scatter(good.arg_true(), values.filter(good).cast(pl.String))


# ---------------------------------------------------------------- per-record route


def _member_names_repeat(text: str) -> bool:
    """True when some object of a syntactically valid JSON text repeats a member name.

    Names are compared after unescaping, so ``"qty"`` and ``"q\\u0074y"`` collide.
    """
    stack: list[set[str] | None] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while True:
                j = text.index('"', j)
                k = j - 1
                while text[k] == "\\":
                    k -= 1
                if (j - 1 - k) % 2 == 0:
                    break
                j += 1
            rest = j + 1
            while rest < n and text[rest] in " \t\r\n":
                rest += 1
            if rest < n and text[rest] == ":":
                names = stack[-1] if stack else None
                if names is not None:
                    name = _name_decoder.decode(text[i : j + 1].encode("utf-8"))
                    if name in names:
                        return True
                    names.add(name)
            i = j + 1
            continue
        if c == "{":
            stack.append(set())
        elif c == "[":
            stack.append(None)
        elif c in "}]":
            stack.pop()
        i += 1
    return False


def _strings_ok(doc: _TxnDoc) -> str | None:
    """Refuse NUL characters and lone surrogates (possible only through escapes)."""
    for name, s in (
        ("txn_id", doc.txn_id),
        ("kind", doc.kind),
        ("item", doc.stock_key.item),
        ("location", doc.stock_key.location),
        ("valid_time", doc.valid_time),
        ("source_time", doc.source_time),
    ):
        if "\x00" in s:
            return f"member {name!r} contains a NUL character"
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return f"member {name!r} contains a lone surrogate"
    return None


_SHORT_ID_CHARS = limits.MAX_ID_BYTES // 4
"""Identifiers of at most this many characters are within ``limits.MAX_ID_BYTES``."""


def _identifiers_ok(doc: _TxnDoc) -> str | None:
    """Refuse identifiers above ``limits.MAX_ID_BYTES`` (UTF-8 bytes)."""
    sk = doc.stock_key
    if max(len(doc.txn_id), len(sk.item), len(sk.location)) <= _SHORT_ID_CHARS:
        return None  # no character takes more than 4 bytes, even a lone surrogate (3)
    for name, s in (("txn_id", doc.txn_id), ("item", sk.item), ("location", sk.location)):
        size = len(s.encode("utf-8", "surrogatepass"))
        if size > limits.MAX_ID_BYTES:
            return f"member {name!r} is {size} bytes, above the {limits.MAX_ID_BYTES} byte limit"
    return None


def _decode_struct(raw: bytes) -> _TxnDoc | Malformed:
    """Typed decoding of one value, with the checks msgspec does not make."""
    if len(raw) > MAX_VALUE_BYTES:
        return Malformed(f"value is {len(raw)} bytes, above the {MAX_VALUE_BYTES} byte limit")
    try:
        doc = _txn_decoder.decode(raw)
    except _DECODE_ERRORS as e:
        return Malformed(f"not a well-formed transaction: {str(e)[:120]}")
    problem = _identifiers_ok(doc)
    if problem is not None:
        return Malformed(problem)
    if b"\\" not in raw:
        if raw.count(b'"') == _QUOTES_IN_A_WELL_FORMED_VALUE:
            return doc
        return Malformed("duplicate member name")
    problem = _strings_ok(doc)
    if problem is not None:
        return Malformed(problem)
    if _member_names_repeat(raw.decode("utf-8")):
        return Malformed("duplicate member name")
    return doc


def _per_record(values: Sequence[bytes]) -> tuple[list[str | None], dict[str, list[object]]]:
    """Decode values one by one; returns error messages and raw field columns."""
    errors: list[str | None] = []
    cols: dict[str, list[object]] = {f: [] for f in _FIELDS}
    for raw in values:
        doc = _decode_struct(raw)
        if isinstance(doc, Malformed):
            errors.append(doc.message)
            for f in _FIELDS:
                cols[f].append(None)
            continue
        errors.append(None)
        cols["txn_id"].append(doc.txn_id)
        cols["revision"].append(doc.revision)
        cols["kind"].append(doc.kind)
        cols["item"].append(doc.stock_key.item)
        cols["location"].append(doc.stock_key.location)
        cols["valid_time"].append(doc.valid_time)
        cols["qty"].append(doc.qty)
        cols["source_time"].append(doc.source_time)
    return errors, cols


# ---------------------------------------------------------------- timestamps

_RFC3339 = (
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]+))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))$"
)
_TS_PARTS = ("y", "mo", "d", "h", "mi", "s", "frac", "z", "sign", "oh", "om")
_TS_NUMBERS = ("y", "mo", "d", "h", "mi", "s", "oh", "om")


def _calendar_stages(p: str) -> list[list[pl.Expr]]:
    """Stages turning the numeric parts ``_{p}_y`` ... into ``_{p}_ok`` and ``_{p}_seconds``.

    Used by the general grammar; the canonical layout's UTC form is read by
    ``_utc_stages``, which a test holds to the same result for every date and
    time of day. The date becomes a day number by Howard Hinnant's
    days-from-civil algorithm (Polars integer ``//`` floors, as Python's does).
    """

    def c(name: str) -> pl.Expr:
        return pl.col(f"_{p}_{name}")

    y, mo = c("y"), c("mo")
    leap = (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))
    month_days = (
        pl.when(mo == 2)
        .then(pl.when(leap).then(29).otherwise(28))
        .when(mo.is_in([4, 6, 9, 11]))
        .then(30)
        .otherwise(31)
    )
    checks = [
        (
            y.is_not_null()
            & mo.is_between(1, 12)
            & c("d").is_between(1, month_days)
            & (c("h") <= 23)
            & (c("mi") <= 59)
            & (c("s") <= 59)
            & (c("zulu") | ((c("oh") <= 23) & (c("om") <= 59)))
        )
        .fill_null(False)
        .alias(f"_{p}_ok"),
        (y - (mo <= 2).cast(pl.Int64)).alias(f"_{p}_yy"),
        pl.when(mo > 2).then(mo - 3).otherwise(mo + 9).alias(f"_{p}_mp"),
        pl.when(c("zulu"))
        .then(0)
        .otherwise((c("oh") * 3600 + c("om") * 60) * pl.when(c("west")).then(-1).otherwise(1))
        .alias(f"_{p}_offset"),
    ]
    era = [(c("yy") // 400).alias(f"_{p}_era")]
    yoe = [(c("yy") - c("era") * 400).alias(f"_{p}_yoe")]
    doe = [
        (c("yoe") * 365 + c("yoe") // 4 - c("yoe") // 100 + (153 * c("mp") + 2) // 5 + c("d") - 1).alias(
            f"_{p}_doe"
        )
    ]
    seconds = [
        (
            (c("era") * 146_097 + c("doe") - 719_468) * 86_400
            + c("h") * 3600
            + c("mi") * 60
            + c("s")
            - c("offset")
        ).alias(f"_{p}_seconds")
    ]
    return [checks, era, yoe, doe, seconds]


def _nanos(frac: pl.Expr) -> pl.Expr:
    """Fraction digits (null when absent) as nanoseconds, truncated after nine digits."""
    return (
        pl.when(frac.is_null())
        .then(0)
        .otherwise(frac.str.slice(0, 9).str.pad_end(9, "0").cast(pl.Int64, strict=False))
    )


def _instant_stages(text: str, p: str) -> list[list[pl.Expr]]:
    """Staged expressions turning any RFC 3339 column into ``_{p}_ok``, ``_{p}_seconds``, ``_{p}_nanos``.

    Follows the documented rules: ASCII digits, ``T``/``t`` and ``Z``/``z``,
    mandatory offset, no leap second, fraction truncated to nanoseconds. Work
    is split into stages so that every expression stays small.
    """
    g = pl.col(f"_{p}")
    field = {name: g.struct.field(str(i + 1)) for i, name in enumerate(_TS_PARTS)}
    extract = [pl.col(text).str.extract_groups(_RFC3339).alias(f"_{p}")]
    numbers = [field[n].cast(pl.Int64, strict=False).alias(f"_{p}_{n}") for n in _TS_NUMBERS]
    numbers += [
        field["z"].is_not_null().alias(f"_{p}_zulu"),
        (field["sign"] == "-").alias(f"_{p}_west"),
        _nanos(field["frac"]).alias(f"_{p}_nanos"),
    ]
    return [extract, numbers, *_calendar_stages(p)]


_UTC_SECONDS_FORMAT = "%Y-%m-%dT%H:%M:%S"
"""The first 19 characters of a ``_ZULU`` match written with an upper-case ``T``."""


def _utc_stages(text: str, p: str) -> list[list[pl.Expr]]:
    """Like ``_instant_stages`` for a column already known to match ``_ZULU`` (or null).

    The date and time of day are read by one Polars datetime parse of the
    first 19 characters (no digit-by-digit arithmetic). That parse refuses
    every impossible date and time the general grammar refuses, and gives the
    same seconds for every one it accepts, with one exception: it reads a
    leap second ``:60``, which the rules refuse, so second 60 is excluded
    here. A ``t`` separator (or anything else the parse refuses) leaves the
    row to the per-record route, which applies the general grammar. The
    fraction runs from position 20 to the final ``Z``.
    """
    t = pl.col(text)
    at = t.str.slice(0, 19).str.strptime(pl.Datetime("ms"), _UTC_SECONDS_FORMAT, strict=False, cache=False)
    frac = pl.when(t.str.len_bytes() > 20).then(t.str.slice(20, t.str.len_bytes() - 21))
    return [
        [
            (at.is_not_null() & (t.str.slice(17, 2) < "60")).fill_null(False).alias(f"_{p}_ok"),
            (at.cast(pl.Int64) // 1000).alias(f"_{p}_seconds"),
            _nanos(frac).alias(f"_{p}_nanos"),
        ]
    ]


def _finishing_plan() -> list[list[pl.Expr]]:
    """Stages that parse both instants and fold their failures into ``error``.

    Built once: constructing Polars expressions costs more than running them
    on a small batch.
    """
    v = _instant_stages("valid_time", "v")
    s = _instant_stages("source_time", "s")
    stages = [v_stage + s_stage for v_stage, s_stage in zip(v, s, strict=True)]
    stages.append(
        [
            pl.when(pl.col("error").is_not_null())
            .then(pl.col("error"))
            .when(~pl.col("_v_ok"))
            .then(pl.lit("member 'valid_time' is not an RFC 3339 timestamp with offset"))
            .when(~pl.col("_s_ok"))
            .then(pl.lit("member 'source_time' is not an RFC 3339 timestamp with offset"))
            .alias("error"),
            pl.col("_v_seconds").alias("valid_s"),
            pl.col("_v_nanos").alias("valid_nanos"),
            pl.col("_s_seconds").alias("source_s"),
            pl.col("_s_nanos").alias("source_nanos"),
        ]
    )
    stages.append(
        [
            pl.col("error"),
            *(
                pl.when(pl.col("error").is_null()).then(pl.col(c)).alias(c)
                for c in DECODED_SCHEMA
                if c != "error"
            ),
        ]
    )
    return stages


_FINISHING = _finishing_plan()


def _finish(raw: pl.DataFrame, errors: pl.Series) -> pl.DataFrame:
    """Parse both instants, fold their failures into ``error``, null out failed rows."""
    lf = raw.lazy().with_columns(errors.alias("error"))
    for stage in _FINISHING[:-1]:
        lf = lf.with_columns(stage)
    return lf.select(_FINISHING[-1]).collect()


def _typed_plan(capture: list[pl.Expr], members: list[pl.Expr]) -> list[list[pl.Expr]]:
    """Stages over a slice of text ``v`` and byte sizes ``size``: a bulk route.

    ``capture`` and ``members`` turn the text into the member columns (null
    where the layout is not proven); the later stages are common to both bulk
    routes. ``ok`` is true exactly when the row needs nothing else: integers in
    signed 64-bit, identifiers and value within their byte limits, both
    instants valid. Other rows are left to the next route.
    """
    stages: list[list[pl.Expr]] = [capture, members]
    v = _utc_stages("valid_time", "v")
    s = _utc_stages("source_time", "s")
    stages += [v_stage + s_stage for v_stage, s_stage in zip(v, s, strict=True)]
    ok = (
        pl.all_horizontal(
            *(pl.col(f).is_not_null() for f in _FIELDS),
            *(pl.col(f).str.len_bytes() <= limits.MAX_ID_BYTES for f in _ID_FIELDS),
            pl.col("size") <= MAX_VALUE_BYTES,
            pl.col("_v_ok"),
            pl.col("_s_ok"),
        )
        .fill_null(False)
        .alias("ok")
    )
    stages.append(
        [
            ok,
            pl.lit(None, dtype=pl.String).alias("error"),
            *(pl.col(f) for f in ("txn_id", "revision", "kind", "item", "location")),
            pl.col("_v_seconds").alias("valid_s"),
            pl.col("_v_nanos").alias("valid_nanos"),
            pl.col("qty"),
            pl.col("_s_seconds").alias("source_s"),
            pl.col("_s_nanos").alias("source_nanos"),
        ]
    )
    return stages


def _typed(f: str, text: pl.Expr) -> pl.Expr:
    return (text.cast(pl.Int64, strict=False) if f in _INT_FIELDS else text).alias(f)


def _canonical_plan() -> list[list[pl.Expr]]:
    """The canonical layout: one anchored match of ``_CANONICAL`` proves the layout and
    captures every member."""
    m = pl.col("_m")
    return _typed_plan(
        [pl.col("v").str.extract_groups(_CANONICAL).alias("_m"), pl.col("size")],
        [_typed(f, m.struct.field(str(i + 1))) for i, f in enumerate(_FIELDS)] + [pl.col("size")],
    )


def _any_order_plan() -> list[list[pl.Expr]]:
    """Any member order and whitespace: ``_ANY_ORDER`` proves the layout, one pattern per
    member finds its value (see ``_ANY_ORDER`` for why that proves each member once)."""
    v = pl.col("v")
    return _typed_plan(
        [v, pl.col("size"), v.str.contains(_ANY_ORDER).alias("_layout")],
        [
            _typed(f, pl.when(pl.col("_layout")).then(v.str.extract(_MEMBER_PATTERNS[f], 1)))
            for f in _FIELDS
        ]
        + [pl.col("size")],
    )


_CANONICAL_PLAN = _canonical_plan()
_ANY_ORDER_PLAN = _any_order_plan()


def _bulk_route(plan: list[list[pl.Expr]], text: pl.Series, sizes: pl.Series) -> pl.DataFrame:
    """A bulk route's ``plan`` over slices of the column, evaluated in parallel.

    Each slice drops its text and captures before the later stages: only the
    typed columns are kept.
    """
    chunks = []
    for start in range(0, len(text), _BULK_CHUNK):
        lf = pl.LazyFrame({"v": text.slice(start, _BULK_CHUNK), "size": sizes.slice(start, _BULK_CHUNK)})
        capture, members, *stages, final = plan
        lf = lf.select(capture).select(members)  # the text and the captures go here
        for stage in stages:
            lf = lf.with_columns(stage)
        chunks.append(lf.select(final))
    return pl.concat(pl.collect_all(chunks), rechunk=False)


# ---------------------------------------------------------------- public entry points


def decode_values(values: pl.Series) -> pl.DataFrame:
    """Decode a Binary column of source values, one output row per input row.

    ``error`` is null for well-formed values and then every other column holds
    the decoded member; otherwise the other columns are null.

    Rows the canonical route proves well-formed are decoded there; rows in
    another member order or with whitespace, which the any-order route proves
    well-formed, there; both without a Python object per record. Every other
    row goes through the strict per-record route and the general instant
    grammar. Which route a row takes never changes its result.
    """
    if len(values) == 0:
        return pl.DataFrame(schema=DECODED_SCHEMA)
    text, sizes = _utf8_text(values), values.bin.size()
    out = _bulk_route(_CANONICAL_PLAN, text, sizes)
    rest = out.get_column("ok").not_().arg_true()
    out = out.drop("ok")
    if not len(rest):
        return out
    again = _bulk_route(_ANY_ORDER_PLAN, text.gather(rest), sizes.gather(rest))
    slow = again.get_column("ok").not_().arg_true()
    again = again.drop("ok")
    if len(slow):
        slow_errors, slow_cols = _per_record(values.gather(rest.gather(slow)).to_list())
        strict = _finish(
            pl.DataFrame(slow_cols, schema=_RAW_SCHEMA),
            pl.Series("error", slow_errors, dtype=pl.String),
        )
        again = again.with_columns(
            again.get_column(c).scatter(slow, strict.get_column(c)) for c in DECODED_SCHEMA
        )
    return out.with_columns(out.get_column(c).scatter(rest, again.get_column(c)) for c in DECODED_SCHEMA)


def decode_key(raw: bytes | None) -> StockKey | Malformed:
    """A transport key: a JSON array of exactly two strings ``[item, location]``."""
    if raw is None:
        return Malformed("record carries no transport key")
    if len(raw) > MAX_VALUE_BYTES:
        return Malformed("transport key is above the size limit")
    try:
        item, location = _key_decoder.decode(raw)
    except _DECODE_ERRORS as e:
        return Malformed(f'transport key is not a ["item","location"] array: {str(e)[:80]}')
    for s in (item, location):
        if "\x00" in s:
            return Malformed("transport key contains a NUL character")
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return Malformed("transport key contains a lone surrogate")
    return StockKey(item, location)


def decode_keys(keys: pl.Series) -> pl.DataFrame:
    """Decode a nullable Binary column of transport keys (each distinct key once).

    Columns ``tk_item``/``tk_location`` (null when undecodable) and ``tk_error``.
    """
    distinct = keys.unique().to_list()
    items: list[str | None] = []
    locations: list[str | None] = []
    problems: list[str | None] = []
    for raw in distinct:
        k = decode_key(raw)
        if isinstance(k, Malformed):
            items.append(None)
            locations.append(None)
            problems.append(k.message)
        else:
            items.append(k.item)
            locations.append(k.location)
            problems.append(None)
    table = pl.DataFrame(
        {
            "key": pl.Series(distinct, dtype=pl.Binary),
            "tk_item": pl.Series(items, dtype=pl.String),
            "tk_location": pl.Series(locations, dtype=pl.String),
            "tk_error": pl.Series(problems, dtype=pl.String),
        }
    )
    return (
        keys.alias("key")
        .to_frame()
        .join(table, on="key", how="left", nulls_equal=True, maintain_order="left")
        .drop("key")
    )


def rows_to_transactions(frame: pl.DataFrame) -> list[Transaction | Malformed]:
    """Turn decoded rows back into ledger values (for tests and diagnostics)."""
    out: list[Transaction | Malformed] = []
    for row in frame.iter_rows(named=True):
        if row["error"] is not None:
            out.append(Malformed(row["error"]))
            continue
        out.append(
            Transaction(
                txn_id=row["txn_id"],
                revision=row["revision"],
                kind=row["kind"],
                stock_key=StockKey(row["item"], row["location"]),
                valid_ns=row["valid_s"] * timefmt.NS_PER_SECOND + row["valid_nanos"],
                qty=row["qty"],
                source_ns=row["source_s"] * timefmt.NS_PER_SECOND + row["source_nanos"],
            )
        )
    return out


def decode_many(values: Sequence[bytes]) -> list[Transaction | Malformed]:
    """Decode a batch of values through the columnar route."""
    with gc_paused():
        return rows_to_transactions(decode_values(pl.Series(values, dtype=pl.Binary)))


def decode_transaction(raw: bytes) -> Transaction | Malformed:
    """Decode one value through the same columnar route (convenience)."""
    return decode_many([raw])[0]


__all__ = [
    "DECODED_SCHEMA",
    "MAX_VALUE_BYTES",
    "Malformed",
    "decode_key",
    "decode_keys",
    "decode_many",
    "decode_transaction",
    "decode_values",
    "gc_paused",
    "rows_to_transactions",
]
