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
-- Adding it reads every row of `jobs` once, under the table's lock, as the
-- migration runs (retention keeps the table small).

ALTER TABLE jobs
    ADD CONSTRAINT jobs_run_after_before_10000
    CHECK (run_after < '10000-01-01 00:00:00+00');
