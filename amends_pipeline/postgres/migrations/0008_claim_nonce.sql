-- Claimant nonces: who installed the current ownership epoch.
--
-- Every claim writes a fresh random nonce with the epoch it installs. After a
-- lost claim reply the claimant re-reads the partition row and adopts the
-- installed epoch only when the installed nonce is its own; otherwise another
-- claimant's epoch (or the one before its claim) is installed and it claims
-- again. NULL: no claim since this column exists (never adopted).
ALTER TABLE partitions ADD COLUMN claim_nonce text
    CHECK (claim_nonce IS NULL OR claim_nonce <> '');
