-- What the payload's and the traceparent's CHECKs cost each update of a job,
-- by hand: docs/benchmarks.md, "Two checks ran on every write of a job".
-- Run on a scratch database migrated by `jobwire migrate`, with the two
-- checks put back on the table first:
--
--   psql -d scratch -f docs/bench/unchanging-columns-before.sql
--   psql -d scratch -f docs/bench/checks-per-update-by-hand.sql
--
-- Each variant times an UPDATE of every row's updated_at three times with
-- the check on the table, then three times without it, then puts it back.
-- Never run this on a database you keep: it empties `jobs`.
\timing on

\echo 5,000 jobs with a 16 KB payload (stored out of line)
TRUNCATE jobs;
INSERT INTO jobs (job_id, queue, job_type, payload)
SELECT gen_random_uuid(), 'q', 'noop',
       jsonb_build_object('i', i, 'filler',
                          (SELECT string_agg(md5(i::text || g::text), '')
                           FROM generate_series(1, 500) g))
FROM generate_series(1, 5000) i;
VACUUM ANALYZE jobs;
\echo with jobs_payload_size
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
ALTER TABLE jobs DROP CONSTRAINT jobs_payload_size;
\echo without
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
ALTER TABLE jobs ADD CONSTRAINT jobs_payload_size
    CHECK (octet_length(payload::text) <= 1048576) NOT VALID;

\echo 50,000 jobs with a 100-byte payload
TRUNCATE jobs;
INSERT INTO jobs (job_id, queue, job_type, payload)
SELECT gen_random_uuid(), 'q', 'noop', jsonb_build_object('i', i, 'filler', repeat('x', 100))
FROM generate_series(1, 50000) i;
VACUUM ANALYZE jobs;
\echo with jobs_payload_size
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
ALTER TABLE jobs DROP CONSTRAINT jobs_payload_size;
\echo without
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
ALTER TABLE jobs ADD CONSTRAINT jobs_payload_size
    CHECK (octet_length(payload::text) <= 1048576) NOT VALID;

\echo 50,000 jobs with a traceparent
TRUNCATE jobs;
INSERT INTO jobs (job_id, queue, job_type, traceparent)
SELECT gen_random_uuid(), 'q', 'noop',
       '00-' || md5(i::text) || '-' || left(md5((i + 1)::text), 16) || '-01'
FROM generate_series(1, 50000) i;
VACUUM ANALYZE jobs;
\echo with jobs_traceparent_format
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
ALTER TABLE jobs DROP CONSTRAINT jobs_traceparent_format;
\echo without
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
UPDATE jobs SET updated_at = now();
ALTER TABLE jobs ADD CONSTRAINT jobs_traceparent_format
    CHECK (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;
TRUNCATE jobs;
