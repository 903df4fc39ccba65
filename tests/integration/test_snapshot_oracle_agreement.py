"""The oracle over a snapshot table equals the oracle over the same records as the topic gives them.

Generated histories (the oracle agreement generator: amendments, cancellations,
conflicts, malformed and misrouted records) are written to a real Delta table on
disk as raw messages, with the headers a topic could carry: the reserved marker
header, headers the client could not read, other headers, none; the namespace's
recorded marker sits at its offset and must be left out. Reading the table back
for the oracle (``snapshot_columns``) must give the result the records give.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core.ledger import CloseOutOfRange, Coordinates, Record
from amends_core.oracle import compute
from amends_pipeline.kafka.topics import MARKER_HEADER, Marker
from amends_pipeline.snapshot.read import snapshot_columns
from amends_pipeline.snapshot.table import SCHEMA, Identity, SnapshotTable, captured
from tests.unit.test_oracle_agreement import CFG, histories

MARKER = Marker("gen", "inc", "nonce-1", 0)


def outcome(by_partition: dict[int, Any]) -> object:
    try:
        r = compute(CFG, by_partition)
    except CloseOutOfRange as e:
        return ("CloseOutOfRange", e.key, e.day)
    return (r.result, r.rejections, dict(r.reason_counts))


def _row(p: int, r: Record, how: int) -> dict[str, Any]:
    """A message for ``r``: reserved ones carry the marker header or unreadable headers."""
    headers: list[dict[str, Any]] | None = None
    unreadable = False
    if r.reserved_header:
        if how % 2:
            unreadable = True
        else:
            headers = [{"name": "trace", "value": b"t"}, {"name": MARKER_HEADER, "value": None}]
    elif how % 3 == 1:
        headers = [{"name": "trace", "value": b"t"}]
    elif how % 3 == 2:
        headers = []
    return {
        "partition": p, "offset": r.coords.offset, "key": r.key, "value": r.value or None,
        "headers": headers, "headers_unreadable": unreadable, "timestamp_ms": 1_700_000_000_000,
        "timestamp_type": 1, "gap_end": None, "gap_reason": None,
    }


def _shifted(recs: list[Record]) -> list[Record]:
    """The records one offset up: offset 0 holds the recorded marker, as after provisioning."""
    return [dataclasses.replace(r, coords=Coordinates(r.coords.source, r.coords.partition, r.coords.offset + 1))
            for r in recs]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(histories(), st.data())
def test_the_oracle_over_the_snapshot_equals_the_oracle_over_the_same_records(
    by_partition: dict[int, list[Record]], data: st.DataObject
) -> None:
    flagged = {
        p: _shifted([
            dataclasses.replace(r, reserved_header=True) if data.draw(st.integers(0, 9), label="flag") == 0 else r
            for r in recs
        ])
        for p, recs in by_partition.items()
    }
    where = Path(tempfile.mkdtemp(prefix="amends-snapshot-agreement-"))
    try:
        table = SnapshotTable.open(str(where / "t"), Identity("gen-source", "gen-topic", CFG.partitions))
        ends: dict[int, int] = {}
        for p in range(CFG.partitions):
            recs = flagged.get(p, [])
            marker_row = {
                **_row(p, Record(MARKER.to_bytes(), None, Coordinates("x", p, 0)), 0),
                "headers": [{"name": MARKER_HEADER, "value": b"1"}],
            }
            rows = [marker_row] + [_row(p, r, data.draw(st.integers(0, 5), label="headers")) for r in recs]
            end = (recs[-1].coords.offset + 1) if recs else 1
            base = table.table()
            table.append(p, captured(base, p), end, pa.Table.from_pylist(rows, schema=SCHEMA), base=base)
            ends[p] = end
        version = table.version()
        read = {
            p: snapshot_columns(table, version, p, ends[p], (0, Marker("gen", "inc", "nonce-1", p)) if p == 0 else None)
            for p in range(CFG.partitions)
        }
        # Partition 0 names its recorded marker (left out); the others have none recorded, so their
        # offset 0 is an ordinary message carrying the marker header: a reserved record.
        expected = {
            p: flagged.get(p, []) if p == 0 else [
                Record(MARKER.to_bytes(), None, Coordinates(CFG.source_incarnation, p, 0), True),
                *flagged.get(p, []),
            ]
            for p in range(CFG.partitions)
        }
        assert outcome(read) == outcome(expected)
    finally:
        shutil.rmtree(where, ignore_errors=True)
