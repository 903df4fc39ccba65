"""The source snapshot table: every raw source record, kept in Delta Lake beyond Kafka's retention.

One table holds one source topic (one topic ID): a row per message, partitioned
by source partition, with the message exactly as the broker handed it over
(key and value bytes, headers, timestamp) and nothing interpreted. Offsets with
no message (transaction markers, aborted or compacted records, or records
retention deleted before any capture) are kept as gap rows that name why, so
every offset below a partition's captured end is accounted for exactly once.

Resume contract, per source partition P: the Delta application transaction
``amends-snapshot-P`` holds the partition's captured end E. Every offset below
E is in the table once (a record row, or inside one gap row) and nothing at or
above E is. An append reads E at some table version, takes offsets [E, high)
from the topic and commits their rows together with the new end, against that
same table version: a concurrent appender of the same partition then fails to
commit (Delta reports the concurrent application transaction) and re-reads E,
so no offset is ever written twice; a commit that never happened (a process
killed mid-append) leaves only unreferenced data files, which ``vacuum`` removes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import polars as pl
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from amends_pipeline.snapshot import URI_ENV

if TYPE_CHECKING:
    from amends_pipeline.manifest import Manifest

DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "var" / "snapshot"
"""Where tables live when ``AMENDS_SNAPSHOT_URI`` is unset: the checkout's git-ignored ``var/``."""

APP_PREFIX = "amends-snapshot-"
FORMAT = 1
"""Layout version written into the table's description; a table of another layout is refused."""

HEADER = pa.struct([pa.field("name", pa.string()), pa.field("value", pa.binary())])
SCHEMA = pa.schema([
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", pa.list_(HEADER)),
    pa.field("headers_unreadable", pa.bool_(), nullable=False),
    pa.field("timestamp_ms", pa.int64()),
    pa.field("timestamp_type", pa.int8()),
    pa.field("gap_end", pa.int64()),
    pa.field("gap_reason", pa.string()),
])
"""A record row has ``gap_end`` null; a gap row stands for offsets [offset, gap_end) and has no message."""


class SnapshotError(Exception):
    """The snapshot table cannot be used as asked; one line says why (and names the setting)."""


class NoSnapshot(SnapshotError):
    """No snapshot table exists at the location yet."""


class WrongTopic(SnapshotError):
    """The table holds another topic (another topic ID): it is never mixed with this one."""


class Concurrent(SnapshotError):
    """Another appender committed this partition first; re-read the captured end and go on."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Which topic a table holds, written into the table when it is created."""

    topic: str
    topic_id: str
    partitions: int

    def text(self) -> str:
        return json.dumps({"format": FORMAT, "topic": self.topic, "topic_id": self.topic_id,
                           "partitions": self.partitions}, sort_keys=True)

    @classmethod
    def parse(cls, text: str | None) -> Identity:
        try:
            d = json.loads(text or "")
            if d.get("format") != FORMAT:
                msg = f"layout {d.get('format')!r}, this amends writes layout {FORMAT}"
                raise SnapshotError(msg)
            return cls(str(d["topic"]), str(d["topic_id"]), int(d["partitions"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            msg = "the table at the snapshot location was not written by amends (no amends identity)"
            raise SnapshotError(msg) from e


def location(uri: str | None, topic: str) -> str:
    """The table's URI: ``uri`` (``AMENDS_SNAPSHOT_URI``) or the default folder, one table per topic.

    A ``file://`` URI and a relative or absolute path are local folders; ``s3://``, ``gs://``,
    ``az://`` (and every scheme ``deltalake`` accepts) are passed on as they are, with storage
    options from the environment. A malformed value raises SnapshotError naming the setting.
    """
    text = (uri or "").strip()
    if not text:
        return str((DEFAULT_ROOT / topic).resolve())
    parsed = urlparse(text)
    if parsed.scheme in ("", "file"):
        path = Path(parsed.path if parsed.scheme == "file" else text)
        if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
            msg = f"{URI_ENV}={text!r}: a file:// URI names no host (file:///path)"
            raise SnapshotError(msg)
        return str((path / topic).resolve())
    if len(parsed.scheme) == 1:  # a Windows drive letter is not a scheme we serve
        msg = f"{URI_ENV}={text!r} is not a URI or a path"
        raise SnapshotError(msg)
    if not parsed.netloc:
        msg = f"{URI_ENV}={text!r}: {parsed.scheme}:// needs a bucket or container"
        raise SnapshotError(msg)
    return text.rstrip("/") + "/" + topic


def identity_of(m: Manifest) -> Identity:
    """What a snapshot of a namespace's source must hold: its topic, bound by the topic ID recorded
    at provisioning (on a cluster without topic IDs, by the incarnation's marker namespace)."""
    return Identity(m.source_topic, m.source_topic_id or f"no-topic-id:{m.marker_namespace}", m.partitions)


def namespace_table(uri: str | None, m: Manifest, *, create: bool = True) -> SnapshotTable:
    """The snapshot table of a namespace's source topic under ``uri`` (``AMENDS_SNAPSHOT_URI``),
    created empty on first use when ``create``; NoSnapshot when it does not exist and not ``create``."""
    return SnapshotTable.open(location(uri, m.source_topic), identity_of(m), create=create)


@dataclass
class SnapshotTable:
    """One topic's snapshot table at ``uri``; opened (or created) by ``open``."""

    uri: str
    identity: Identity
    storage_options: dict[str, str] | None = None

    @classmethod
    def open(
        cls, uri: str, identity: Identity, *, create: bool = True,
        storage_options: Mapping[str, str] | None = None,
    ) -> SnapshotTable:
        """Open the table, creating it empty when ``create`` and it does not exist yet.

        Raises WrongTopic when the table holds another topic ID (or topic), SnapshotError
        when the location cannot be reached or holds something else.
        """
        opts = dict(storage_options) if storage_options else None
        try:
            found = _load(uri, opts)
            if found is None:
                if not create:
                    msg = f"no snapshot table at {uri} (run `amends snapshot` to take one)"
                    raise NoSnapshot(msg)
                if uri.startswith("/"):
                    Path(uri).mkdir(parents=True, exist_ok=True)
                try:
                    DeltaTable.create(
                        uri, SCHEMA, mode="error", partition_by=["partition"], name="amends source snapshot",
                        description=identity.text(), storage_options=opts,
                    )
                except (DeltaError, CommitFailedError, OSError):
                    pass  # another appender created it first; it is checked below like any table
                found = _load(uri, opts)
                if found is None:
                    msg = f"cannot create the snapshot table at {uri}"
                    raise SnapshotError(msg)
        except (OSError, DeltaError) as e:
            msg = f"snapshot table at {uri} ({URI_ENV}) cannot be reached: {one_line(e)}"
            raise SnapshotError(msg) from e
        held = Identity.parse(found.metadata().description)
        if (held.topic_id, held.topic) != (identity.topic_id, identity.topic):
            msg = (
                f"the snapshot table at {uri} holds topic {held.topic!r} (topic ID {held.topic_id}),"
                f" not {identity.topic!r} (topic ID {identity.topic_id}); a recreated topic needs a"
                f" snapshot location of its own ({URI_ENV})"
            )
            raise WrongTopic(msg)
        return cls(uri, held, opts)

    # ------------------------------------------------------------ reading

    def table(self, version: int | None = None) -> DeltaTable:
        try:
            return DeltaTable(self.uri, version=version, storage_options=self.storage_options)
        except (OSError, DeltaError) as e:
            msg = f"snapshot table at {self.uri} cannot be read: {one_line(e)}"
            raise SnapshotError(msg) from e

    def version(self) -> int:
        return int(self.table().version())

    def ends(self, partitions: Sequence[int], version: int | None = None) -> dict[int, int]:
        """The captured end of each partition (0 before its first append)."""
        t = self.table(version)
        return {p: captured(t, p) for p in partitions}

    def pinned(
        self, partitions: Sequence[int], version: int | None = None
    ) -> tuple[int, str, dict[int, int]]:
        """(version, table ID, captured end of each partition) of one version (None: the latest),
        from one read of the log. The ID is the Delta table's own: a table deleted and created
        again at the same location has another."""
        t = self.table(version)
        return int(t.version()), str(t.metadata().id), {p: captured(t, p) for p in partitions}

    def stats(self, partition: int, version: int | None = None) -> tuple[int, int]:
        """(rows, bytes of data files) of one partition, from the table's log (no data read)."""
        adds = pl.DataFrame(self.table(version).get_add_actions(flatten=True))
        if adds.is_empty():
            return 0, 0
        mine = adds.filter(pl.col("partition.partition") == partition)
        return int(mine["num_records"].sum()), int(mine["size_bytes"].sum())

    def scan(self, version: int | None = None) -> pl.LazyFrame:
        """The whole table as of ``version`` (None: the latest) as a lazy Polars frame."""
        try:
            return pl.scan_delta(self.uri, version=version, storage_options=self.storage_options)
        except (OSError, DeltaError) as e:
            msg = f"snapshot table at {self.uri} cannot be read: {one_line(e)}"
            raise SnapshotError(msg) from e

    def rows(self, partition: int, start: int, end: int, version: int | None = None) -> pl.DataFrame:
        """Record and gap rows of one partition that start in [start, end), in offset order."""
        return (
            self.scan(version)
            .filter((pl.col("partition") == partition) & pl.col("offset").is_between(start, end, "left"))
            .sort("offset")
            .collect(engine="streaming")
        )

    def gaps(self, partition: int, version: int | None = None) -> list[tuple[int, int, str]]:
        """(start, end, reason) of every gap row of one partition, in offset order."""
        df = (
            self.scan(version)
            .filter((pl.col("partition") == partition) & pl.col("gap_end").is_not_null())
            .select("offset", "gap_end", "gap_reason")
            .sort("offset")
            .collect()
        )
        return [(int(a), int(b), str(r)) for a, b, r in df.iter_rows()]

    # ------------------------------------------------------------ writing

    def append(self, partition: int, start: int, end: int, rows: pa.Table, *, base: DeltaTable) -> int:
        """Commit ``rows`` (offsets of [start, end)) and the captured end ``end``, read at ``base``.

        Raises Concurrent when another appender committed this partition since ``base``
        was read (nothing of this append is then visible), SnapshotError when the captured
        end at ``base`` is not ``start``. Returns the table version committed.
        """
        at = captured(base, partition)
        if at != start:
            msg = f"partition {partition}: captured end is {at}, not {start}"
            raise SnapshotError(msg)
        txn = CommitProperties(
            app_transactions=[Transaction(APP_PREFIX + str(partition), end)],
            custom_metadata={
                "amends.partition": str(partition), "amends.from": str(start), "amends.to": str(end),
            },
        )
        try:
            write_deltalake(base, rows, mode="append", commit_properties=txn)
        except CommitFailedError as e:
            msg = f"partition {partition}: another appender committed offsets from {start} first"
            raise Concurrent(msg) from e
        except (OSError, DeltaError) as e:
            msg = f"snapshot table at {self.uri} cannot be written: {one_line(e)}"
            raise SnapshotError(msg) from e
        return int(self.table().version())

    def vacuum(self, retention_hours: int, *, dry_run: bool) -> list[str]:
        """Delete data files no table version newer than ``retention_hours`` refers to."""
        t = self.table()
        files = t.vacuum(retention_hours=retention_hours, dry_run=dry_run, enforce_retention_duration=False)
        return list(files)

    def compact(self) -> dict[str, Any]:
        """Rewrite small files into large ones (same rows, a new table version)."""
        return dict(self.table().optimize.compact())


def _load(uri: str, opts: dict[str, str] | None) -> DeltaTable | None:
    try:
        return DeltaTable(uri, storage_options=opts)
    except TableNotFoundError:
        return None


def captured(t: DeltaTable, partition: int) -> int:
    """The partition's captured end in the table version ``t`` (0 before its first append)."""
    v = t.transaction_version(APP_PREFIX + str(partition))
    return 0 if v is None else int(v)


def one_line(e: BaseException) -> str:
    """A Delta or storage error as one line of at most 300 characters."""
    text = " ".join(str(e).split())
    return text[:300] or type(e).__name__

