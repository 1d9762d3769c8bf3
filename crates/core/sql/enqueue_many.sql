-- Insert many jobs in one statement: the statement is the function
-- jobwire_enqueue_rows (migrations 20261202000001 and 20261202000004),
-- planned once per session
-- there instead of on every call here. One array per column, one element
-- per job; returns one row per input row, in input order: the new job, or
-- (duplicate = true) the job that already holds the same (job_type,
-- dedup_key). A NULL job_id means the key is held by a transaction that
-- committed while the statement ran; the caller retries those rows. A
-- payload over job_settings.max_payload_bytes fails the whole statement with
-- SQLSTATE JW413: nothing is written.
SELECT ord, job_id, duplicate, state, run_after, created_at
FROM jobwire_enqueue_rows($1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::jsonb[],
                          $6::integer[], $7::timestamptz[], $8::bigint[], $9::text[],
                          $10::text[], $11::text[], $12::text[])
