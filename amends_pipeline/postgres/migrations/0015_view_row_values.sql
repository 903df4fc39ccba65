-- The values of balance and alert rows as columns beside the envelope bytes.
--
-- Verification compares the whole view with the oracle at every boundary;
-- decoding hundreds of thousands of envelopes for it cost seconds. The view
-- store writes `close` and `threshold` from the envelope it decoded when it
-- applied the row (the bytes stay the record of what was received), so the
-- check reads the view's values as columns. Rows stored before this migration
-- get them from their envelopes here; a present balance or alert row without
-- them is read from its envelope.
ALTER TABLE view_rows ADD COLUMN close bigint, ADD COLUMN threshold bigint;

UPDATE view_rows
SET close = (convert_from(envelope, 'UTF8')::jsonb #>> '{payload,close}')::bigint,
    threshold = (convert_from(envelope, 'UTF8')::jsonb #>> '{payload,threshold}')::bigint
WHERE family <> 'key-status' AND present;
