-- jobwire schema: the checks of two columns that never change after the
-- enqueue, the payload's ceiling and the traceparent's format, run where a
-- value is written, not on every write of a job.
--
-- PostgreSQL evaluates every CHECK of a table on every UPDATE, whatever the
-- UPDATE changes. So each claim, completion and heartbeat measured the
-- job's payload as text (reading back and decompressing one stored out of
-- line) and matched its traceparent against a regular expression. By hand,
-- an UPDATE of 50,000 jobs' updated_at: a traceparent on every job added
-- about 6 µs to each row's update, a 16 KB payload about 53 µs, a 100-byte
-- one about 1 µs (docs/benchmarks.md, "Two checks ran on every write of a
-- job").
--
-- Both checks are now constraints of the column's type, a domain.
-- PostgreSQL checks a domain's constraints where a value is converted to
-- it: an INSERT, or an UPDATE that sets the column. An UPDATE that leaves
-- the column alone keeps the stored value, unchecked. The constraints keep
-- their names, their SQLSTATE (23514) and their limits; clients still see
-- jsonb and text (PostgreSQL describes a domain-typed result column by its
-- base type). The other checks stay on the table: they read columns that
-- change (the state, the lease), or cost next to nothing.
--
-- Order matters on a large table. A CHECK that reads a column would be
-- validated again by the column's change of type, so those go first and
-- come back NOT VALID (jobs_tracestate_size reads the traceparent). A
-- column changes to a domain without constraints by a relabelling, with no
-- rewrite of the table. And the domains' constraints are added NOT VALID:
-- the rows already there passed the same checks on the table.

CREATE DOMAIN jobwire_payload AS jsonb;
CREATE DOMAIN jobwire_traceparent AS text;

ALTER TABLE jobs
    DROP CONSTRAINT jobs_payload_size,
    DROP CONSTRAINT jobs_traceparent_format,
    DROP CONSTRAINT jobs_tracestate_size;
ALTER TABLE jobs
    ALTER COLUMN payload TYPE jobwire_payload,
    ALTER COLUMN traceparent TYPE jobwire_traceparent;

ALTER DOMAIN jobwire_payload ADD CONSTRAINT jobs_payload_size
    CHECK (octet_length(VALUE::text) <= 1048576) NOT VALID;
ALTER DOMAIN jobwire_traceparent ADD CONSTRAINT jobs_traceparent_format
    CHECK (VALUE ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;
ALTER TABLE jobs ADD CONSTRAINT jobs_tracestate_size
    CHECK (tracestate IS NULL OR (octet_length(tracestate) <= 512 AND traceparent IS NOT NULL))
    NOT VALID;
