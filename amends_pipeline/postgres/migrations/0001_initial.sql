-- amends durable state, version 1.
--
-- Every table lives in the schema the migration runner selects (search_path);
-- nothing here names a schema. Everything is scoped by namespace (ns_id).
-- The hot tables written once per source record (observations, key_days,
-- outputs, outbox) carry no foreign keys: only the fenced processing
-- transaction writes them, with key ids it read from stock_keys, and per-row
-- RI triggers would cost more than the batch itself.

-- One row per namespace: the fixed interpretation (configuration) it was
-- registered with. The digest never changes for a namespace.
CREATE TABLE namespaces (
    ns_id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text        NOT NULL UNIQUE,
    config_digest  text        NOT NULL,
    config         text        NOT NULL,  -- canonical configuration JSON
    partitions     integer     NOT NULL CHECK (partitions BETWEEN 1 AND 65536),
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- Worker ownership and progress per source partition. The processing
-- transaction and claim both lock this row (the fence).
CREATE TABLE partitions (
    ns_id           integer NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    partition       integer NOT NULL CHECK (partition >= 0),
    epoch           bigint  NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    next_offset     bigint  NOT NULL DEFAULT 0 CHECK (next_offset >= 0),  -- exclusive frontier
    last_sequence   bigint  NOT NULL DEFAULT 0 CHECK (last_sequence >= 0), -- last outbox sequence
    records_total   bigint  NOT NULL DEFAULT 0,
    rejected_total  bigint  NOT NULL DEFAULT 0,
    envelopes_total bigint  NOT NULL DEFAULT 0,
    batches_total   bigint  NOT NULL DEFAULT 0,
    last_commit_at  timestamptz,
    PRIMARY KEY (ns_id, partition)
);

-- Configured stock keys; key_id is the compact handle the hot tables use.
CREATE TABLE stock_keys (
    key_id     bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ns_id      integer NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    item       text    NOT NULL,
    location   text    NOT NULL,
    partition  integer NOT NULL,
    UNIQUE (ns_id, item, location)
);

-- Revision evidence: one append-only row per accepted source record.
-- (txn_id, revision, candidate) names a distinct canonical candidate; later
-- rows with the same triple are duplicate observations at other offsets.
-- Instants are (UTC day, nanoseconds of day) because years 1..9999 in
-- nanoseconds do not fit 64 bits.
CREATE TABLE observations (
    key_id      bigint  NOT NULL,
    src_offset  bigint  NOT NULL CHECK (src_offset >= 0),
    txn_id      text    NOT NULL,
    revision    bigint  NOT NULL CHECK (revision >= 1),
    candidate   integer NOT NULL CHECK (candidate >= 0),
    kind        text    NOT NULL CHECK (kind IN ('NEW', 'AMEND', 'CANCEL')),
    valid_day   integer NOT NULL,
    valid_nod   bigint  NOT NULL CHECK (valid_nod >= 0 AND valid_nod < 86400000000000),
    qty         bigint  NOT NULL,
    source_day  integer NOT NULL,
    source_nod  bigint  NOT NULL CHECK (source_nod >= 0 AND source_nod < 86400000000000),
    PRIMARY KEY (key_id, src_offset)
);

-- The sparse projection: one row per activity day. A repair rewrites only the
-- rows from its earliest affected day onward.
CREATE TABLE key_days (
    key_id        bigint  NOT NULL,
    day           integer NOT NULL,
    total         numeric NOT NULL,  -- sum of active quantities; may leave 64 bits
    active_count  bigint  NOT NULL CHECK (active_count > 0),
    close         bigint  NOT NULL,
    alert         boolean NOT NULL,  -- a downward crossing of the key's threshold
    PRIMARY KEY (key_id, day)
) WITH (fillfactor = 90);

-- Latest committed output intent per output ID, as columns (the published
-- bytes live in the outbox). family: 0 balance, 1 alert, 2 key-status (day 0).
CREATE TABLE outputs (
    key_id          bigint   NOT NULL,
    family          smallint NOT NULL CHECK (family IN (0, 1, 2)),
    day             integer  NOT NULL,
    version         bigint   NOT NULL CHECK (version >= 1),
    present         boolean  NOT NULL,
    close           bigint,
    threshold       bigint,
    status          text CHECK (status IN ('READY', 'BLOCKED')),
    reasons         text,    -- JSON array of [txn_id, revision] pairs
    cause_offset    bigint   NOT NULL,
    cause_txn_id    text     NOT NULL,
    cause_revision  bigint   NOT NULL,
    PRIMARY KEY (key_id, family, day),
    CHECK (family <> 2 OR day = 0)
) WITH (fillfactor = 90);

-- Ordered, immutable output intent; envelope holds exactly the bytes the relay
-- publishes. The receipt columns record where a publication landed.
CREATE TABLE outbox (
    ns_id             integer NOT NULL,
    partition         integer NOT NULL,
    sequence          bigint  NOT NULL CHECK (sequence >= 1),
    envelope          bytea   NOT NULL,
    acked             boolean NOT NULL DEFAULT false,
    output_partition  integer,
    output_offset     bigint,
    PRIMARY KEY (ns_id, partition, sequence)
);

-- Relay progress: the outbox prefix acknowledged so far (rows 1..acked_sequence).
-- A separate row from the partition so the relay never waits for a worker batch.
CREATE TABLE relay_progress (
    ns_id           integer NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    partition       integer NOT NULL,
    acked_sequence  bigint  NOT NULL DEFAULT 0 CHECK (acked_sequence >= 0),
    PRIMARY KEY (ns_id, partition)
);

-- Rejected raw input, unchanged, with the first rule it broke.
CREATE TABLE quarantine (
    ns_id       integer NOT NULL,
    partition   integer NOT NULL,
    src_offset  bigint  NOT NULL,
    source      text    NOT NULL,
    raw_value   bytea   NOT NULL,
    raw_key     bytea,
    reason      text    NOT NULL CHECK (reason IN ('MALFORMED', 'IDENTITY', 'REVISION', 'KIND',
                    'CANCEL_QUANTITY', 'VALID_TIME', 'UNKNOWN_KEY', 'KEY_MISMATCH', 'ROUTING')),
    detail      text    NOT NULL DEFAULT '',
    PRIMARY KEY (ns_id, partition, src_offset)
);

-- Processing measurements: one sample per committed batch, the latest 32 kept.
-- Cumulative counts live on the partition row.
CREATE TABLE measurements (
    ns_id         integer NOT NULL,
    partition     integer NOT NULL,
    batch         bigint  NOT NULL,
    first_offset  bigint,
    next_offset   bigint  NOT NULL,
    records       integer NOT NULL,
    rejected      integer NOT NULL,
    envelopes     integer NOT NULL,
    compute_us    bigint  NOT NULL,
    committed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ns_id, partition, batch)
);

-- The materialized view: the highest version seen per output ID, withdrawals
-- (present = false) included, so older deliveries cannot resurrect a row.
CREATE TABLE view_rows (
    ns_id           integer NOT NULL,
    output_id       text    NOT NULL,  -- the encoded JSON tuple
    partition       integer NOT NULL,
    family          text    NOT NULL,
    item            text    NOT NULL,
    location        text    NOT NULL,
    day             integer,
    version         bigint  NOT NULL,
    present         boolean NOT NULL,
    envelope        bytea   NOT NULL,  -- the bytes as received
    applied_offset  bigint  NOT NULL,
    PRIMARY KEY (ns_id, output_id)
);
CREATE INDEX view_rows_by_key ON view_rows (ns_id, item, location);

-- View progress per output partition: exclusive applied frontier and, once a
-- protocol violation was seen, the diagnostic that stops the partition.
CREATE TABLE view_progress (
    ns_id             integer NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    partition         integer NOT NULL,
    next_offset       bigint  NOT NULL DEFAULT 0 CHECK (next_offset >= 0),
    stopped           text,
    stopped_offset    bigint,
    stopped_envelope  bytea,
    PRIMARY KEY (ns_id, partition)
);
