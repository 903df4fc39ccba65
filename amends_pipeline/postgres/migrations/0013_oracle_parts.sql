-- The oracle's result for one source partition, computed by a run of its own.
--
-- Dagster may run each source partition's oracle as a separate run on a
-- separate host (the `oracle_partition` asset); the blocking verification check
-- then combines the stored parts instead of recomputing them. A part is used
-- only when everything it was computed from still holds at the boundary being
-- verified: the source incarnation, the source end, the configuration, the
-- oracle's code and the operator skips of its partition. Each partition keeps
-- its latest part; `part` is the encoded result (amends_core.oracle.partial).
CREATE TABLE oracle_parts (
    ns_id          integer     NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    partition      integer     NOT NULL,
    incarnation    text        NOT NULL,  -- the source topic's ID, or its marker incarnation
    source_end     bigint      NOT NULL,
    config_digest  text        NOT NULL,
    code_version   text        NOT NULL,  -- digest of the oracle's source code
    skips          text        NOT NULL,  -- operator-skipped offsets of the partition, comma-separated
    records        bigint      NOT NULL,  -- records the oracle read (skips left out)
    lost           text[]      NOT NULL,  -- reasons naming consumed records the source no longer held
    source         text        NOT NULL,  -- where the records were read (snapshot version, then the topic)
    part           bytea       NOT NULL,
    computed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ns_id, partition)
);
