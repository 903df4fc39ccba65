"""The binding of a namespace to its source and output topics.

Resume contract: a worker, verifier or replayer may use a source topic only
after ``check_source`` confirmed that every partition still carries the
namespace's marker (same nonce, same offset) and that the retained range
still starts at or below the offset it needs next. Anything else is an error,
never a silent skip or reprocessing.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from amends_core.errors import OperationError
from amends_core.ledger import Config
from amends_pipeline.kafka.topics import MARKER_HEADER, Marker, Reader, Watermarks, Writer
from amends_pipeline.postgres.connection import Database


class IncarnationMismatch(OperationError):
    """The topic is not the source incarnation this namespace was provisioned with."""


class SourceLost(OperationError):
    """Records the namespace still needs are no longer retained by the topic."""


class ManifestMissing(OperationError):
    """The namespace has not been provisioned (no manifest in PostgreSQL)."""


@dataclass(frozen=True, slots=True)
class Manifest:
    namespace: str
    source_topic: str
    output_topic: str
    partitions: int
    source_incarnation: str
    config_digest: str
    nonce: str
    markers: dict[int, int]
    """Marker offset per source partition."""
    marker_namespace: str
    """The namespace that wrote the markers; a rebuild shares its source's."""

    def marker(self, partition: int) -> Marker:
        return Marker(self.marker_namespace, self.source_incarnation, self.nonce, partition)


def read_manifest(db: Database, ns_id: int, cfg: Config) -> Manifest:
    with db.transaction(f"reading the manifest of {cfg.namespace!r}") as conn:
        row = conn.execute(
            "SELECT source_topic, output_topic, partitions, source_incarnation, config_digest,"
            " nonce, marker_namespace FROM source_manifest WHERE ns_id = %s",
            (ns_id,),
        ).fetchone()
        marks = conn.execute(
            "SELECT partition, marker_offset FROM source_markers WHERE ns_id = %s", (ns_id,)
        ).fetchall()
    if row is None:
        msg = f"namespace {cfg.namespace!r} is not provisioned; run `amends provision` first"
        raise ManifestMissing(msg)
    m = Manifest(cfg.namespace, *row[:6], dict(marks), row[6])
    if m.config_digest != cfg.digest():
        msg = f"namespace {cfg.namespace!r} was provisioned with another configuration"
        raise IncarnationMismatch(msg)
    return m


def write_manifest(db: Database, ns_id: int, m: Manifest) -> None:
    with db.transaction(f"writing the manifest of {m.namespace!r}") as conn:
        conn.execute(
            "INSERT INTO source_manifest (ns_id, source_topic, output_topic, partitions,"
            " source_incarnation, config_digest, nonce, marker_namespace)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (ns_id, m.source_topic, m.output_topic, m.partitions, m.source_incarnation,
             m.config_digest, m.nonce, m.marker_namespace),
        )
        conn.execute(
            "INSERT INTO source_markers (ns_id, partition, marker_offset)"
            " SELECT %s, p, o FROM unnest(%s::int[], %s::bigint[]) AS u(p, o)",
            (ns_id, list(m.markers), list(m.markers.values())),
        )


def new_nonce() -> str:
    return secrets.token_hex(16)


def write_markers(writer: Writer, topic: str, cfg: Config, nonce: str) -> dict[int, int]:
    """Produce one marker per source partition; returns the offsets they landed at."""
    writer.delivered.clear()
    for p in range(cfg.partitions):
        m = Marker(cfg.namespace, cfg.source_incarnation, nonce, p)
        writer.produce(topic, p, m.to_bytes(), None, [(MARKER_HEADER, b"1")])
    writer.flush()
    return dict(writer.delivered)


def check_source(reader: Reader, m: Manifest, needed: dict[int, int] | None = None) -> dict[int, Watermarks]:
    """Confirm the topic's incarnation and retention; return its watermarks.

    ``needed[p]`` is the lowest offset the caller still has to read (a worker's
    frontier; 0 for a full-history verifier).
    """
    n = reader.partitions()
    if n != m.partitions:
        msg = f"topic {m.source_topic!r} has {n} partitions, the manifest says {m.partitions}"
        raise IncarnationMismatch(msg)
    marks: dict[int, Watermarks] = {}
    for p in range(m.partitions):
        wm = reader.watermarks(p)
        off = m.markers[p]
        if wm.high <= off:
            msg = (
                f"{m.source_topic}[{p}] ends at {wm.high}, before its marker at {off}:"
                " the topic was recreated or truncated"
            )
            raise IncarnationMismatch(msg)
        if wm.low > off:
            msg = (
                f"{m.source_topic}[{p}] no longer retains its marker at offset {off}"
                f" (retained from {wm.low}); the source incarnation cannot be confirmed"
            )
            raise SourceLost(msg)
        found = None
        for rec, msg_ in reader.records(m.source_incarnation, p, off, off + 1):
            found = Marker.parse(msg_.value()) if rec is None else None
        want = m.marker(p)
        if found != want:
            msg = (
                f"{m.source_topic}[{p}] offset {off} does not carry this namespace's marker:"
                " the topic was recreated or belongs to another incarnation"
            )
            raise IncarnationMismatch(msg)
        need = (needed or {}).get(p, 0)
        if wm.low > need:
            msg = (
                f"{m.source_topic}[{p}] retains offsets from {wm.low}, but offset {need} is"
                " still needed: the source prefix was lost (never skipped)"
            )
            raise SourceLost(msg)
        marks[p] = wm
    return marks
