-- Publication receipts move out of the outbox rows into runs.
--
-- Acknowledging used to UPDATE every published outbox row (acked, output
-- partition, output offset): a new version of the whole row, envelope
-- included, for each record the relay published, and as many dead rows for
-- vacuum. Now an outbox row is written once and never changed:
--   * acknowledged is derived: sequence <= relay_progress.acked_sequence (it
--     always was the authority; the column only repeated it);
--   * where a row landed is kept in outbox_receipts as runs: sequences
--     first_sequence..last_sequence landed on output_partition at consecutive
--     offsets from first_offset. One relay batch on one output partition is
--     usually one run, so acknowledging writes one narrow row per batch.
-- A receipt recorded for a pending row (record_receipt) is a run of one row,
-- replaced when it is recorded again or acknowledged with a new offset. Runs
-- of one partition never overlap. Rows acknowledged without an offset have no
-- run (their output offset is unknown, as before).
CREATE TABLE outbox_receipts (
    ns_id             integer NOT NULL,
    partition         integer NOT NULL,
    first_sequence    bigint  NOT NULL CHECK (first_sequence >= 1),
    last_sequence     bigint  NOT NULL,
    output_partition  integer NOT NULL CHECK (output_partition >= 0),
    first_offset      bigint  NOT NULL CHECK (first_offset >= 0),
    PRIMARY KEY (ns_id, partition, first_sequence),
    CHECK (last_sequence >= first_sequence)
);

INSERT INTO outbox_receipts (ns_id, partition, first_sequence, last_sequence, output_partition,
                             first_offset)
SELECT ns_id, partition, sequence, sequence, output_partition, output_offset
FROM outbox
WHERE output_offset IS NOT NULL AND output_partition IS NOT NULL;

ALTER TABLE outbox DROP COLUMN acked;
ALTER TABLE outbox DROP COLUMN output_partition;
ALTER TABLE outbox DROP COLUMN output_offset;

-- Each outbox row as operators (and `amends prune`) read it: acknowledged or
-- not, and where it landed when a receipt says so.
CREATE VIEW outbox_status AS
SELECT o.ns_id, o.partition, o.sequence, o.envelope, o.committed_at,
       o.sequence <= r.acked_sequence AS acked,
       c.output_partition,
       c.first_offset + (o.sequence - c.first_sequence) AS output_offset
FROM outbox o
JOIN relay_progress r ON r.ns_id = o.ns_id AND r.partition = o.partition
LEFT JOIN LATERAL (
    SELECT x.first_sequence, x.last_sequence, x.output_partition, x.first_offset
    FROM outbox_receipts x
    WHERE x.ns_id = o.ns_id AND x.partition = o.partition AND x.first_sequence <= o.sequence
    ORDER BY x.first_sequence DESC
    LIMIT 1
) c ON c.last_sequence >= o.sequence;
