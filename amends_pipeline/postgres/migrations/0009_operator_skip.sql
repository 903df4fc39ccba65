-- Operator skips, and the operation error that stopped a worker.
--
-- A source record whose processing is an operation error (a daily close
-- outside signed 64-bit) stops its partition: the frontier stays on it and
-- every restart fails on it again. `amends skip` lets an operator move past
-- exactly that one record, on the record: one audit row per skipped offset,
-- written in the same fenced transaction that moves the frontier past it.
-- Below a partition's frontier every delivered offset is now applied
-- (observations), quarantined (quarantine) or skipped by an operator (here).
CREATE TABLE operator_skips (
    ns_id            integer     NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    partition        integer     NOT NULL CHECK (partition >= 0),
    src_offset       bigint      NOT NULL CHECK (src_offset >= 0),
    source           text        NOT NULL,
    raw_value        bytea       NOT NULL,  -- the skipped record, unchanged
    raw_key          bytea,
    value_sha256     text        NOT NULL CHECK (length(value_sha256) = 64),
    value_size       integer     NOT NULL CHECK (value_size >= 0),
    error            text        NOT NULL,  -- the operation error processing it raised
    reason           text        NOT NULL CHECK (reason <> '' AND length(reason) <= 500),
    operator         text        NOT NULL CHECK (operator <> '' AND length(operator) <= 128),
    epoch            bigint      NOT NULL,  -- the ownership epoch the skip claimed
    frontier_before  bigint      NOT NULL CHECK (frontier_before <= src_offset),
    skipped_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ns_id, partition, src_offset)
);

-- The latest operation error a worker stopped on, per partition (diagnostics
-- for `amends verify` and the Dagster check). It describes the partition only
-- while the frontier has not moved past src_offset.
CREATE TABLE partition_stops (
    ns_id       integer     NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    partition   integer     NOT NULL CHECK (partition >= 0),
    src_offset  bigint      NOT NULL CHECK (src_offset >= 0),
    error       text        NOT NULL,
    stopped_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ns_id, partition)
);
