-- How far the source snapshot is known to hold what the worker consumed.
--
-- Verification checks that every source record the pipeline applied or
-- quarantined is still held by the snapshot or the topic. Records below a
-- partition's captured end are held by the snapshot, and the snapshot only
-- ever grows (appends; compaction rewrites the same rows), so once one
-- verification found every consumed offset below `covered_below` in table
-- `table_id` at version `table_version`, later verifications of that table
-- at that version or later compare only the offsets consumed since. The row
-- is written by the computations that may write (the `oracle` asset, an
-- `oracle_partition` run), never by `amends verify`; a table with another ID
-- (recreated at the same location) or an older pinned version ignores it.
CREATE TABLE snapshot_coverage (
    ns_id          integer NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    partition      integer NOT NULL,
    table_id       text    NOT NULL,  -- the Delta table's metadata ID
    table_version  bigint  NOT NULL CHECK (table_version >= 0),
    covered_below  bigint  NOT NULL CHECK (covered_below >= 0),
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ns_id, partition)
);
