-- jobwire schema: a job is due before the year 10000.
--
-- PostgreSQL keeps times up to the year 294276, and `infinity`; the clients
-- that read jobs do not (sqlx's decoding, through chrono, ends at the year
-- 262142, and RFC 3339 has four-digit years). One job enqueued through
-- `jobwire_enqueue(…, run_after => 'infinity')`, or with a delay of
-- centuries, made every page and API answer that listed it fail. The Rust
-- enqueue refuses such a job before writing it; this check holds for every
-- writer, a service's own INSERT included. A retry's delay is capped at a
-- year where it is written (`finish_many`), so no retry runs into it.
--
-- A job already stored past the bound (possible before this migration)
-- is moved to the last second of the year 9999 first, in `jobs_history`
-- too (a cancelled one is archived): no reader could show it, and the
-- check could not be added over it. Then the check is added NOT VALID, so
-- adding it does not scan `jobs` under the table's lock: the rows there
-- were just checked by the UPDATE, and every later write is checked.

UPDATE jobs SET run_after = '9999-12-31 23:59:59+00'
WHERE run_after >= '10000-01-01 00:00:00+00';
UPDATE jobs_history SET run_after = '9999-12-31 23:59:59+00'
WHERE run_after >= '10000-01-01 00:00:00+00';

ALTER TABLE jobs
    ADD CONSTRAINT jobs_run_after_before_10000
    CHECK (run_after < '10000-01-01 00:00:00+00') NOT VALID;
