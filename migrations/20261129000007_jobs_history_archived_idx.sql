-- no-transaction
-- jobwire schema: the index retention uses to trim jobs_history oldest first.
-- Built CONCURRENTLY, outside a transaction (the directive above, one
-- statement per file: PostgreSQL runs several statements of one migration as
-- one transaction block), so applying it never blocks writes to the table.
-- See docs/operations.md for the upgrade policy.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_history_archived_idx ON jobs_history (archived_at);
