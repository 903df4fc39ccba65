-- Pruning: when outbox rows were committed, when records were quarantined, and
-- what a quarantine record held once its payload was pruned.
--
-- `amends prune` deletes outbox rows that the relay published and the view
-- applied once they are older than the retention, and drops the raw bytes of
-- quarantine records older than the retention whose source records the topic
-- no longer holds. Rows that exist before this migration count as committed
-- (quarantined) when it ran.
ALTER TABLE outbox ADD COLUMN committed_at timestamptz NOT NULL DEFAULT now();

ALTER TABLE quarantine ADD COLUMN quarantined_at timestamptz NOT NULL DEFAULT now();
-- Set when the payload was pruned: raw_value is then empty and raw_key NULL, and
-- these columns keep the SHA-256 (hex) and length of the original value and key.
ALTER TABLE quarantine ADD COLUMN payload_pruned_at timestamptz;
ALTER TABLE quarantine ADD COLUMN raw_value_sha256 text;
ALTER TABLE quarantine ADD COLUMN raw_value_size integer;
ALTER TABLE quarantine ADD COLUMN raw_key_sha256 text;
ALTER TABLE quarantine ADD COLUMN raw_key_size integer;
ALTER TABLE quarantine ADD CONSTRAINT quarantine_pruned_check
    CHECK (payload_pruned_at IS NULL
        OR (raw_value = '' AND raw_key IS NULL AND raw_value_sha256 IS NOT NULL
            AND raw_value_size IS NOT NULL));
