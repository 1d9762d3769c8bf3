-- Puts the payload's ceiling and the traceparent's format back as CHECKs of
-- the jobs table, as they were before migration 20261204000003 (from
-- migrations 20261129000001 and 20261201000002), on a database migrated by a
-- build that has the migration: the "before" side of docs/benchmarks.md,
-- "Two checks ran on every write of a job". Never run this on a database
-- you keep.
BEGIN;
ALTER DOMAIN jobwire_payload DROP CONSTRAINT jobs_payload_size;
ALTER DOMAIN jobwire_traceparent DROP CONSTRAINT jobs_traceparent_format;
ALTER TABLE jobs
    ADD CONSTRAINT jobs_payload_size CHECK (octet_length(payload::text) <= 1048576),
    ADD CONSTRAINT jobs_traceparent_format
        CHECK (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;
COMMIT;
