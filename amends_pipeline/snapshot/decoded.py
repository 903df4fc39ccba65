"""Classified rows kept beside the raw snapshot, so the oracle decodes each record once.

Decoding and checking a record (``classify_partition``) is most of the oracle's
work, and its result depends only on the record's bytes, the configuration and
the oracle's code. So the rows are kept in a Delta table of their own beside
the raw table, one per (oracle code version, configuration digest): a changed
decoder or rule, or another configuration, starts a new table and decodes
again; nothing is ever reinterpreted by code that did not produce it. A
boundary then decodes only the records captured since the last one and folds
the full history from the kept rows (``partition_from_rows``).

The rows are a cache of a pure function of the raw table. Each append covers
the offsets [start, end) of one partition exactly once, recorded with Delta's
application transaction ``amends-decoded-<partition>`` as the raw table records
its captured end: a concurrent appender of the same range loses the commit
and its rows are simply not kept. Deleting the folder costs one full decode.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from amends_core.ledger import Config
from amends_core.oracle.compute import STORED, classify_partition
from amends_pipeline.kafka.topics import Marker
from amends_pipeline.snapshot.read import snapshot_columns
from amends_pipeline.snapshot.table import SnapshotError, SnapshotTable, one_line

APP_PREFIX = "amends-decoded-"
DECODE_CHUNK = 1_000_000
"""Offsets of one partition decoded (and kept) together."""


def decoded_uri(raw: SnapshotTable, config_digest: str, code_version: str) -> str:
    """Where the kept rows of ``raw`` live for one configuration and oracle code version."""
    return f"{raw.uri.rstrip('/')}.decoded/{code_version}-{config_digest[:16]}"


class DecodedRows:
    """The kept classified rows of one raw snapshot table, for one configuration and oracle code."""

    def __init__(self, raw: SnapshotTable, config_digest: str, code_version: str) -> None:
        self.uri = decoded_uri(raw, config_digest, code_version)
        self.storage_options = raw.storage_options

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None
        except (OSError, DeltaError) as e:
            msg = f"kept oracle rows at {self.uri} cannot be read: {one_line(e)}"
            raise SnapshotError(msg) from e

    def end(self, partition: int) -> int:
        """Offsets below this are classified and kept for ``partition`` (0: none yet)."""
        t = self._table()
        v = None if t is None else t.transaction_version(APP_PREFIX + str(partition))
        return 0 if v is None else int(v)

    def rows(self, partition: int, end: int) -> pl.LazyFrame:
        """The partition's kept rows below ``end`` (``STORED`` columns, in no particular order),
        as a lazy scan: its readers take only the columns and rows they need."""
        t = self._table()
        if t is None or end <= 0:
            return pl.LazyFrame(schema=_schema())
        try:
            return (
                pl.scan_delta(t)
                .filter((pl.col("partition") == partition) & (pl.col("offset") < end))
                .select(STORED)
            )
        except (OSError, DeltaError) as e:
            msg = f"kept oracle rows at {self.uri} cannot be read: {one_line(e)}"
            raise SnapshotError(msg) from e

    def append(self, partition: int, start: int, end: int, rows: pl.DataFrame) -> bool:
        """Keep ``rows`` (the classified records of offsets [start, end)) after what is kept.

        Returns False, keeping nothing, when the kept end is not ``start`` (another
        verification kept this range first) or a concurrent appender won the commit.
        """
        t = self._table()
        at = 0 if t is None else self.end(partition)
        if at != start or end <= start:
            return False
        txn = CommitProperties(app_transactions=[Transaction(APP_PREFIX + str(partition), end)])
        try:
            write_deltalake(
                t if t is not None else self.uri, rows.select(STORED).to_arrow(), mode="append",
                partition_by=None if t is not None else ["partition"],
                commit_properties=txn, storage_options=None if t is not None else self.storage_options,
            )
        except CommitFailedError:
            return False
        except (OSError, DeltaError) as e:
            if t is None and self._table() is not None:
                return False  # another appender created the table first

            msg = f"kept oracle rows at {self.uri} cannot be written: {one_line(e)}"
            raise SnapshotError(msg) from e
        return True


def _schema() -> dict[str, pl.DataType]:
    return {
        "offset": pl.Int64(), "reason": pl.String(), "error": pl.String(), "tk_error": pl.String(),
        "revision": pl.Int64(), "kind": pl.String(), "qty": pl.Int64(), "partition": pl.Int64(),
        "k_partition": pl.Int64(), "kid": pl.Int64(), "txn_id": pl.String(), "valid_s": pl.Int64(),
        "valid_nanos": pl.Int64(), "key": pl.Binary(), "value": pl.Binary(), "reserved": pl.Boolean(),
    }


@dataclass(frozen=True, slots=True)
class Classified:
    """One partition's records classified: what the oracle folds (``partition_from_rows``)."""

    rows: pl.LazyFrame
    """One classified row per record (``STORED``), in no particular order."""
    decoded: int
    """Records decoded for this reading; the others came from the kept rows."""


def classified_snapshot(
    cfg: Config, table: SnapshotTable, version: int, partition: int, end: int,
    marker: tuple[int, Marker] | None, kept: DecodedRows, *, keep: bool,
) -> Classified:
    """The snapshot's records of one partition below ``end`` (table version ``version``), classified.

    Rows kept before are read back; only the records after the kept end are decoded, and
    kept when ``keep``.
    """
    done = start = min(kept.end(partition), end)
    fresh: list[pl.DataFrame] = []
    decoded = 0
    while start < end:
        # A chunk of offsets at a time: the first boundary over a long history holds one
        # chunk's raw bytes, never the whole partition's.
        stop = min(end, start + DECODE_CHUNK)
        cols = snapshot_columns(table, version, partition, stop, marker, start)
        rows = classify_partition(cfg, partition, cols)
        decoded += len(cols)
        del cols
        if keep and not fresh and kept.append(partition, start, stop, rows):
            done = stop  # kept: read back with the rest instead of held here
        else:
            fresh.append(rows)  # and from here on held: ``done`` must not pass a held chunk
        start = stop
    return Classified(pl.concat([kept.rows(partition, done), *(f.lazy() for f in fresh)]), decoded)
