-- Conflicting candidates are rare; index only them, so listing every conflict
-- of a namespace (verification snapshots) never scans the whole evidence log.
CREATE INDEX observations_conflicting ON observations (key_id, txn_id, revision)
    WHERE candidate > 0;
