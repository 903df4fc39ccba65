-- The worker's key cache keeps only each identity's highest revision. A record
-- at a superseded revision makes it read that identity's lower revisions back:
-- index identities, so that read never scans the key's whole evidence log.
CREATE INDEX observations_identity ON observations (key_id, txn_id, revision);
