-- no-transaction
-- jobwire schema: the index retention uses to trim job_outbox_dead oldest first.
-- Built CONCURRENTLY, outside a transaction (the directive above, one
-- statement per file: PostgreSQL runs several statements of one migration as
-- one transaction block), so applying it never blocks writes to the table.
-- See docs/operations.md for the upgrade policy.
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_outbox_dead_failed_idx ON job_outbox_dead (failed_at);
