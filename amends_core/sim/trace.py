"""Versioned, strictly loaded simulation traces.

A trace is everything needed to rerun one schedule exactly, without the
generator: provenance (format, trace version, implementation id, toolchain
string), the configuration with its digest, the seed it came from (information
only), the raw source records (value and transport key as base64, so malformed
bytes survive), the explicit steps, and optionally the failure it showed when
it was written. The deterministic recovery suffix (``Model.drain``) is not
stored: it is part of the implementation.

Document shape (trace_version 1)::

  {"format": "amends-sim-trace", "trace_version": 1,
   "implementation": "amends-py-sim/1", "toolchain": "CPython 3.11.9",
   "config": {...normalised configuration...}, "config_digest": "<sha256>",
   "seed": 7 | null,
   "records": [{"partition": 0, "offset": 0, "key_b64": "..." | null,
                "value_b64": "..."}, ...],
   "steps": [{"actor": "worker", "partition": 0, "outcome": "commit"},
             {"actor": "redeliver", "partition": 1, "outcome": "commit",
              "offset": 3}, ...],
   "failure": null | {"kind": "safety", "check": "ack-order"},
   "worker_ahead": 2}

``worker_ahead`` (optional, an integer from 1 to ``MAX_AHEAD``; absent means
1) is the batches a worker step may run, each folded while the one before
commits (``Model(ahead=...)``); a trace written with it reruns only with it.

Loading refuses: bytes that are not exactly one UTF-8 JSON object (trailing
content included), duplicate or unknown members at any level, a missing or
mistyped member, another format or trace version, another implementation id,
an empty toolchain string, a configuration that does not decode or whose digest
differs from ``config_digest``, records outside the configured partitions or
with repeated offsets, and steps with unknown actors or outcomes. Loading
starts from nothing, so a partial document can never inherit generated data.
This module is pure: callers read and write the bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from amends_core import wire
from amends_core.ledger import Config, ConfigError, Coordinates, Record, compact_json
from amends_core.sim.model import Actor, Outcome, Step

FORMAT = "amends-sim-trace"
TRACE_VERSION = 1
IMPLEMENTATION_ID = "amends-py-sim/1"
"""Changes whenever the meaning of a step or of the recovery suffix changes."""
MAX_AHEAD = 16
"""The most batches per worker step a trace may ask for."""


class TraceError(ValueError):
    """A trace document is refused; the message says why in one line."""


@dataclass(frozen=True, slots=True)
class Trace:
    cfg: Config
    records: tuple[Record, ...]
    steps: tuple[Step, ...]
    seed: int | None = None
    toolchain: str = "unknown"
    implementation: str = IMPLEMENTATION_ID
    failure: tuple[str, str] | None = None
    """(kind, check) of the failure seen when the trace was written; information only."""
    ahead: int = 1
    """Batches a worker step may run (``Model(ahead=...)``)."""

    def with_parts(
        self,
        records: tuple[Record, ...] | None = None,
        steps: tuple[Step, ...] | None = None,
        failure: tuple[str, str] | None = None,
    ) -> Trace:
        return Trace(
            self.cfg,
            self.records if records is None else records,
            self.steps if steps is None else steps,
            self.seed,
            self.toolchain,
            self.implementation,
            failure,
            self.ahead,
        )


# ---------------------------------------------------------------- writing


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _step_json(s: Step) -> dict[str, Any]:
    out: dict[str, Any] = {
        "actor": s.actor.value,
        "partition": s.partition,
        "outcome": s.outcome.value,
    }
    if s.actor is Actor.REDELIVER:
        out["offset"] = s.offset
    return out


def to_json(t: Trace) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "trace_version": TRACE_VERSION,
        "implementation": t.implementation,
        "toolchain": t.toolchain,
        "config": t.cfg.normalised(),
        "config_digest": t.cfg.digest(),
        "seed": t.seed,
        "records": [
            {
                "partition": r.coords.partition,
                "offset": r.coords.offset,
                "key_b64": None if r.key is None else _b64(r.key),
                "value_b64": _b64(r.value),
            }
            for r in sorted(t.records, key=lambda r: (r.coords.partition, r.coords.offset))
        ],
        "steps": [_step_json(s) for s in t.steps],
        "failure": None if t.failure is None else {"kind": t.failure[0], "check": t.failure[1]},
        **({"worker_ahead": t.ahead} if t.ahead != 1 else {}),
    }


def dumps(t: Trace) -> bytes:
    """Canonical bytes: one JSON object, one record or step per line, newline-terminated."""
    obj = to_json(t)
    head = {k: v for k, v in obj.items() if k not in ("records", "steps", "failure")}
    lines = [compact_json(head)[:-1] + ","]
    for name in ("records", "steps"):
        items = obj[name]
        lines.append(f'"{name}":[')
        lines += [compact_json(x) + ("," if i < len(items) - 1 else "") for i, x in enumerate(items)]
        lines.append("],")
    lines.append(f'"failure":{compact_json(obj["failure"])}}}')
    return ("\n".join(lines) + "\n").encode("utf-8")


# ---------------------------------------------------------------- loading


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            msg = f"duplicate member {k!r}"
            raise TraceError(msg)
        out[k] = v
    return out


def _no_float(text: str) -> Any:
    msg = f"number {text[:32]} is not an integer"
    raise TraceError(msg)


def _no_constant(text: str) -> Any:
    msg = f"{text} is not JSON"
    raise TraceError(msg)


def _members(
    obj: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    if not isinstance(obj, dict):
        msg = f"{where} must be an object"
        raise TraceError(msg)
    for k in obj:
        if k not in required and k not in optional:
            msg = f"unknown member {k[:64]!r} in {where}"
            raise TraceError(msg)
    for k in required:
        if k not in obj:
            msg = f"missing member {k!r} in {where}"
            raise TraceError(msg)
    return obj


def _int(obj: dict[str, Any], name: str, where: str, minimum: int = 0) -> int:
    v = obj[name]
    if type(v) is not int or v < minimum:
        msg = f"{where}.{name} must be an integer >= {minimum}"
        raise TraceError(msg)
    return v


def _str(obj: dict[str, Any], name: str, where: str) -> str:
    v = obj[name]
    if not isinstance(v, str):
        msg = f"{where}.{name} must be a string"
        raise TraceError(msg)
    return v


def _unb64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        msg = f"{where} is not valid base64"
        raise TraceError(msg) from None


_TOP = (
    "format", "trace_version", "implementation", "toolchain", "config", "config_digest",
    "seed", "records", "steps", "failure",
)


def loads(data: bytes, *, implementation: str = IMPLEMENTATION_ID) -> Trace:
    """Strictly decode a trace document (see the module docstring for what is refused)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        msg = "trace is not valid UTF-8"
        raise TraceError(msg) from None
    try:
        obj = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_float=_no_float,
            parse_constant=_no_constant,
        )
    except json.JSONDecodeError as e:
        msg = f"trace is not one JSON document: {e.msg} at offset {e.pos}"
        raise TraceError(msg) from None
    except RecursionError:
        msg = "trace nests too deep"
        raise TraceError(msg) from None
    top = _members(obj, "trace", _TOP, ("worker_ahead",))
    if top["format"] != FORMAT:
        msg = f"format {top['format']!r} is not {FORMAT!r}"
        raise TraceError(msg)
    if top["trace_version"] != TRACE_VERSION or type(top["trace_version"]) is not int:
        msg = f"unsupported trace_version {top['trace_version']!r}; this build reads {TRACE_VERSION}"
        raise TraceError(msg)
    impl = _str(top, "implementation", "trace")
    if impl != implementation:
        msg = f"trace was written by implementation {impl!r}, this is {implementation!r}"
        raise TraceError(msg)
    toolchain = _str(top, "toolchain", "trace")
    if not toolchain.strip():
        msg = "trace records no toolchain"
        raise TraceError(msg)
    if not isinstance(top["config"], dict):
        msg = "trace.config must be an object"
        raise TraceError(msg)
    try:
        cfg = wire.decode_config(compact_json(top["config"]).encode("utf-8"))
    except ConfigError as e:
        msg = f"trace configuration is unusable: {e}"
        raise TraceError(msg) from None
    digest = _str(top, "config_digest", "trace")
    if digest != cfg.digest():
        msg = "config_digest does not match the configuration"
        raise TraceError(msg)
    seed = top["seed"]
    if seed is not None and type(seed) is not int:
        msg = "trace.seed must be an integer or null"
        raise TraceError(msg)
    records = _records(top["records"], cfg)
    steps = _steps(top["steps"], cfg)
    failure = top["failure"]
    fail_sig: tuple[str, str] | None = None
    if failure is not None:
        f = _members(failure, "trace.failure", ("kind", "check"))
        fail_sig = (_str(f, "kind", "failure"), _str(f, "check", "failure"))
    ahead = _int(top, "worker_ahead", "trace", minimum=1) if "worker_ahead" in top else 1
    if ahead > MAX_AHEAD:
        msg = f"trace.worker_ahead must be at most {MAX_AHEAD}"
        raise TraceError(msg)
    return Trace(cfg, records, steps, seed, toolchain, impl, fail_sig, ahead)


def _records(raw: Any, cfg: Config) -> tuple[Record, ...]:
    if not isinstance(raw, list):
        msg = "trace.records must be an array"
        raise TraceError(msg)
    out: list[Record] = []
    seen: set[tuple[int, int]] = set()
    for i, item in enumerate(raw):
        where = f"records[{i}]"
        r = _members(item, where, ("partition", "offset", "key_b64", "value_b64"))
        p = _int(r, "partition", where)
        off = _int(r, "offset", where)
        if p >= cfg.partitions:
            msg = f"{where} names partition {p}; the configuration has {cfg.partitions}"
            raise TraceError(msg)
        if (p, off) in seen:
            msg = f"{where} repeats offset {off} of partition {p}"
            raise TraceError(msg)
        seen.add((p, off))
        key = None if r["key_b64"] is None else _unb64(_str(r, "key_b64", where), where)
        value = _unb64(_str(r, "value_b64", where), where)
        out.append(Record(value, key, Coordinates(cfg.source_incarnation, p, off)))
    out.sort(key=lambda r: (r.coords.partition, r.coords.offset))
    return tuple(out)


def _steps(raw: Any, cfg: Config) -> tuple[Step, ...]:
    if not isinstance(raw, list):
        msg = "trace.steps must be an array"
        raise TraceError(msg)
    out = []
    for i, item in enumerate(raw):
        where = f"steps[{i}]"
        actor_name = item.get("actor") if isinstance(item, dict) else None
        needs_offset = ("offset",) if actor_name == Actor.REDELIVER.value else ()
        s = _members(item, where, ("actor", "partition", "outcome", *needs_offset))
        try:
            actor = Actor(_str(s, "actor", where))
            outcome = Outcome(_str(s, "outcome", where))
        except ValueError:
            msg = f"{where} names an unknown actor or outcome"
            raise TraceError(msg) from None
        p = _int(s, "partition", where)
        if p >= cfg.partitions:
            msg = f"{where} names partition {p}; the configuration has {cfg.partitions}"
            raise TraceError(msg)
        off = _int(s, "offset", where) if actor is Actor.REDELIVER else 0
        out.append(Step(actor, p, outcome, off))
    return tuple(out)
