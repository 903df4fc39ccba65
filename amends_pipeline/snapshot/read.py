"""The oracle's input from a snapshot: one partition's records below an offset, as ``Columns``.

The table keeps messages raw; reading them for the oracle applies exactly what
``ops.verify.read_partition`` applies to the topic: the recorded marker of the
namespace is left out, any other message carrying the marker header (or headers
the client could not read) is flagged ``reserved``, and a message without a
value reads as empty bytes. Gap rows hold no record and are passed over.
"""

from __future__ import annotations

import polars as pl

from amends_core.oracle import Columns
from amends_pipeline.kafka.topics import MARKER_HEADER, Marker
from amends_pipeline.snapshot.table import SnapshotTable


def snapshot_columns(
    table: SnapshotTable, version: int, partition: int, end: int, marker: tuple[int, Marker] | None
) -> Columns:
    """The records of one partition below ``end`` held by table version ``version``."""
    df = (
        table.scan(version)
        .filter(
            (pl.col("partition") == partition) & pl.col("gap_end").is_null() & (pl.col("offset") < end)
        )
        .select(
            "offset",
            "key",
            pl.col("value").fill_null(b""),
            (
                pl.col("headers_unreadable")
                | pl.col("headers")
                .list.eval(pl.element().struct.field("name") == MARKER_HEADER)
                .list.any()
                .fill_null(False)
            ).alias("reserved"),
        )
        .sort("offset")
        .collect(engine="streaming")
    )
    if marker is not None:
        at, content = marker
        hit = df.filter((pl.col("offset") == at) & pl.col("reserved"))
        if hit.height and Marker.parse(hit["value"][0]) == content:
            df = df.filter(pl.col("offset") != at)
    return Columns(
        df["offset"].cast(pl.Int64), df["key"], df["value"], df["reserved"].cast(pl.Boolean)
    )


def joined(parts: list[Columns]) -> Columns:
    """Consecutive ranges of one partition as one ``Columns`` (offsets stay in order)."""
    if len(parts) == 1:
        return parts[0]
    names = ("offset", "key", "value", "reserved")
    return Columns(*(pl.concat([getattr(c, name) for c in parts]) for name in names))
