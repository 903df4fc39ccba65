"""The binding of a namespace to its source and output topics.

Resume contract: a worker, verifier or replayer may use a source topic only
after ``check_source`` confirmed that it is the incarnation the namespace was
provisioned with and that the retained range still starts at or below the
offset the caller needs next. Anything else is an error (IncarnationMismatch,
SourceLost), never a silent skip or reprocessing.

Incarnation is decided in this order:

1. Topic ID. A cluster that reports topic IDs (Apache Kafka) gives a topic a
   UUID that a deleted-and-recreated topic never shares; provision records
   it. A different ID is refused, naming both IDs. The marker is then not
   consulted, so retention may delete it like any other record.
2. Marker, for clusters without topic IDs (librdkafka's mock cluster). While
   the marker offset is retained, the message there must be this namespace's
   marker (same nonce). Once retention has passed it, the topic is accepted
   only while its retained range is consistent with the caller's progress:
   it still reaches the frontier (not shorter than what was consumed) and
   starts at or below the offset still needed.

In both cases an offset still needed below the low watermark is SourceLost,
unless the caller holds it elsewhere: ``held[p]`` (a source snapshot's captured
end, ``amends_pipeline.snapshot``) counts every offset below it as retained.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from amends_core.errors import OperationError
from amends_core.ledger import Config
from amends_pipeline.kafka.topics import (
    MARKER_HEADER,
    Marker,
    Reader,
    Watermarks,
    Writer,
    read_headers,
)
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
    source_topic_id: str | None = None
    """The source topic's ID at provisioning; None where the cluster reports no topic IDs."""

    def marker(self, partition: int) -> Marker:
        return Marker(self.marker_namespace, self.source_incarnation, self.nonce, partition)

    def marker_at(self, partition: int) -> tuple[int, Marker]:
        """(offset, content) of the one marker message readers skip in ``partition``."""
        return self.markers[partition], self.marker(partition)

    def needed(self, partition: int, frontier: int) -> int:
        """The first offset at or after ``frontier`` that may hold a record (the marker never does)."""
        return frontier + 1 if frontier == self.markers.get(partition) else frontier


def read_manifest(db: Database, ns_id: int, cfg: Config) -> Manifest:
    with db.transaction(f"reading the manifest of {cfg.namespace!r}") as conn:
        row = conn.execute(
            "SELECT source_topic, output_topic, partitions, source_incarnation, config_digest,"
            " nonce, marker_namespace, source_topic_id FROM source_manifest WHERE ns_id = %s",
            (ns_id,),
        ).fetchone()
        marks = conn.execute(
            "SELECT partition, marker_offset FROM source_markers WHERE ns_id = %s", (ns_id,)
        ).fetchall()
    if row is None:
        msg = f"namespace {cfg.namespace!r} is not provisioned; run `amends provision` first"
        raise ManifestMissing(msg)
    source_topic, output_topic, partitions, incarnation, digest, nonce, marker_namespace, topic_id = row
    m = Manifest(
        cfg.namespace, source_topic, output_topic, partitions, incarnation, digest, nonce, dict(marks),
        marker_namespace, topic_id,
    )
    if m.config_digest != cfg.digest():
        msg = f"namespace {cfg.namespace!r} was provisioned with another configuration"
        raise IncarnationMismatch(msg)
    return m


def write_manifest(db: Database, ns_id: int, m: Manifest) -> None:
    with db.transaction(f"writing the manifest of {m.namespace!r}") as conn:
        conn.execute(
            "INSERT INTO source_manifest (ns_id, source_topic, output_topic, partitions,"
            " source_incarnation, config_digest, nonce, marker_namespace, source_topic_id)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (ns_id, m.source_topic, m.output_topic, m.partitions, m.source_incarnation,
             m.config_digest, m.nonce, m.marker_namespace, m.source_topic_id),
        )
        conn.execute(
            "INSERT INTO source_markers (ns_id, partition, marker_offset)"
            " SELECT %s, p, o FROM unnest(%s::int[], %s::bigint[]) AS u(p, o)",
            (ns_id, list(m.markers), list(m.markers.values())),
        )


def record_topic_id(db: Database, ns_id: int, namespace: str, topic_id: str) -> None:
    """Bind a namespace provisioned before topic IDs were recorded to its topic's ID."""
    with db.transaction(f"recording the source topic ID of {namespace!r}") as conn:
        conn.execute(
            "UPDATE source_manifest SET source_topic_id = %s"
            " WHERE ns_id = %s AND source_topic_id IS NULL",
            (topic_id, ns_id),
        )


def new_nonce() -> str:
    return secrets.token_hex(16)


def marker_key(namespace: str, partition: int) -> bytes:
    """The marker's message key: distinct per namespace and partition, so a compacted
    source topic keeps every namespace's marker (it has no later value under its key)."""
    return f"amends-marker/{namespace}/{partition}".encode()


def write_markers(writer: Writer, topic: str, cfg: Config, nonce: str) -> dict[int, int]:
    """Produce one marker per source partition; returns the offsets they landed at."""
    writer.delivered.clear()
    for p in range(cfg.partitions):
        m = Marker(cfg.namespace, cfg.source_incarnation, nonce, p)
        writer.produce(topic, p, m.to_bytes(), marker_key(cfg.namespace, p), [(MARKER_HEADER, b"1")])
    writer.flush()
    return dict(writer.delivered)


def check_topic_id(reader: Reader, m: Manifest) -> None:
    """Refuse a source topic whose ID differs from the one recorded (IncarnationMismatch)."""
    if m.source_topic_id is None:
        return
    now = reader.topic_id()
    if now is None:
        msg = (
            f"topic {m.source_topic!r} was provisioned with topic ID {m.source_topic_id}, but the"
            " cluster now reports no topic IDs: its incarnation cannot be confirmed"
        )
        raise IncarnationMismatch(msg)
    if now != m.source_topic_id:
        msg = (
            f"topic {m.source_topic!r} has topic ID {now}, but namespace {m.namespace!r} was"
            f" provisioned with topic ID {m.source_topic_id}: the topic was deleted and recreated"
        )
        raise IncarnationMismatch(msg)


def _check_marker(reader: Reader, m: Manifest, p: int, wm: Watermarks) -> None:
    """Marker fallback for clusters without topic IDs (see the module docstring)."""
    off = m.markers[p]
    if wm.high <= off:
        msg = (
            f"{m.source_topic}[{p}] ends at {wm.high}, before its marker at {off}:"
            " the topic was recreated or truncated"
        )
        raise IncarnationMismatch(msg)
    if wm.low > off:
        return  # retention passed the marker: the range checks in check_source decide
    found = None
    for msg_ in reader.messages(p, off, off + 1):
        headers = read_headers(msg_)  # unreadable headers: not a marker
        if msg_.offset() == off and isinstance(headers, list) and any(k == MARKER_HEADER for k, _ in headers):
            found = Marker.parse(msg_.value())
    if found != m.marker(p):
        msg = (
            f"{m.source_topic}[{p}] offset {off} does not carry this namespace's marker:"
            " the topic was recreated or belongs to another incarnation"
        )
        raise IncarnationMismatch(msg)


def check_source(
    reader: Reader, m: Manifest, needed: dict[int, int] | None = None, held: dict[int, int] | None = None
) -> dict[int, Watermarks]:
    """Confirm the topic's incarnation and retention; return its watermarks.

    ``needed[p]`` is the caller's frontier: the lowest offset it still has to
    read (a worker's frontier; 0 for a full-history reader). Partitions absent
    from ``needed`` get the incarnation check only. ``held[p]``: offsets below
    it are held by a source snapshot, so the topic need not retain them.
    """
    n = reader.partitions()
    if n != m.partitions:
        msg = f"topic {m.source_topic!r} has {n} partitions, the manifest says {m.partitions}"
        raise IncarnationMismatch(msg)
    check_topic_id(reader, m)
    marks: dict[int, Watermarks] = {}
    for p in range(m.partitions):
        wm = reader.watermarks(p)
        if m.source_topic_id is None:
            _check_marker(reader, m, p, wm)
        frontier = (needed or {}).get(p)
        if frontier is not None:
            check_range(m, p, wm, frontier, (held or {}).get(p, 0))
        marks[p] = wm
    return marks


def check_range(m: Manifest, p: int, wm: Watermarks, frontier: int, held: int = 0) -> None:
    """The retained range must reach ``frontier`` and start at or below the offset needed next,
    unless that offset lies below ``held`` (a source snapshot's captured end holds it)."""
    if wm.high < frontier:
        msg = (
            f"{m.source_topic}[{p}] ends at {wm.high}, below the frontier {frontier}:"
            " the topic was recreated or truncated"
        )
        raise IncarnationMismatch(msg)
    need = m.needed(p, frontier)
    if wm.low > need >= held:
        snapshot = f" and the source snapshot holds offsets below {held} only" if held else ""
        msg = (
            f"{m.source_topic}[{p}] retains offsets from {wm.low}{snapshot}, but offset {need} is"
            " still needed: the source prefix was lost (never skipped)"
        )
        raise SourceLost(msg)


def markers_confirm(reader: Reader, m: Manifest) -> bool:
    """True when every partition still retains this namespace's marker, unchanged.

    IncarnationMismatch when a retained marker offset holds something else;
    False when retention has passed any marker (nothing left to confirm with).
    """
    wms = {p: reader.watermarks(p) for p in range(m.partitions)}
    if any(wm.low > m.markers[p] for p, wm in wms.items()):
        return False
    for p, wm in wms.items():
        _check_marker(reader, m, p, wm)
    return True
