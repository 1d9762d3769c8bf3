-- no-transaction
-- jobwire schema: the jobs whose lease expired, for the dashboard's "lease
-- expiries in the last hour". Partial: only rows the sweeper has stamped are
-- in it, so the claim and completion of an ordinary job (lease_expired_at
-- NULL) add no entry. Built CONCURRENTLY, one statement per file, so applying
-- it never blocks writes to the table.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_lease_expired_idx ON jobs (lease_expired_at)
    WHERE lease_expired_at IS NOT NULL;
