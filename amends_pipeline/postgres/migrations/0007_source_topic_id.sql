-- Topic IDs, and a rejection reason for messages that imitate the marker.
--
-- A broker that reports topic IDs (Apache Kafka 2.8 and later) gives every
-- topic a UUID that a deleted-and-recreated topic under the same name never
-- shares. `amends provision` records it here and every user of the source
-- compares it; a namespace provisioned on a broker without topic IDs (the
-- librdkafka mock cluster) keeps NULL and is bound by its marker messages.
ALTER TABLE source_manifest ADD COLUMN source_topic_id text
    CHECK (source_topic_id IS NULL OR source_topic_id <> '');

-- Only the recorded marker (its offset and nonce) is skipped; any other
-- message carrying the reserved `amends-marker` header is quarantined.
ALTER TABLE quarantine DROP CONSTRAINT quarantine_reason_check;
ALTER TABLE quarantine ADD CONSTRAINT quarantine_reason_check
    CHECK (reason IN ('RESERVED_HEADER', 'MALFORMED', 'IDENTITY', 'REVISION', 'KIND',
        'CANCEL_QUANTITY', 'VALID_TIME', 'UNKNOWN_KEY', 'KEY_MISMATCH', 'ROUTING'));
