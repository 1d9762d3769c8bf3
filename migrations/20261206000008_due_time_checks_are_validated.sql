-- jobwire schema: the two due-time checks on `jobs` (migrations
-- 20261206000005 and 20261206000006, added NOT VALID) are validated.
--
-- Validation reads every row of `jobs` but takes a lock that lets claims,
-- enqueues and completions go on. A job written past a bound by an older
-- process between those migrations' UPDATE and their check (the check
-- holds only from its commit on) is moved to the bound first, as they
-- did; since their commit no writer can add another.
UPDATE jobs SET run_after = '9999-12-31 23:59:59+00'
WHERE run_after >= '10000-01-01 00:00:00+00';
UPDATE jobs SET run_after = '0001-01-01 00:00:00+00'
WHERE run_after < '0001-01-01 00:00:00+00';
-- Such a job may have been archived since (cancelled, or claimed and
-- finished): the history has no check, and job lists read it too.
UPDATE jobs_history SET run_after = '9999-12-31 23:59:59+00'
WHERE run_after >= '10000-01-01 00:00:00+00';
UPDATE jobs_history SET run_after = '0001-01-01 00:00:00+00'
WHERE run_after < '0001-01-01 00:00:00+00';

ALTER TABLE jobs VALIDATE CONSTRAINT jobs_run_after_before_10000;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_run_after_from_the_year_1;
