-- no-transaction
-- jobwire schema: the same partial index on jobs_history, so counting the
-- last hour's lease expiries never reads the whole history.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_history_lease_expired_idx ON jobs_history (lease_expired_at)
    WHERE lease_expired_at IS NOT NULL;
