-- Insert one job without a dedup key: the everyday enqueue, one job per
-- business transaction. The same insert as jobwire_enqueue_rows (see
-- enqueue_many.sql) without its arrays, ordinality and key lookups, which
-- a job that holds no key needs none of: about a fifth less database time
-- per enqueue (docs/benchmarks.md, "A single job is enqueued without
-- arrays"). The wake-ups and enqueue limits are the jobs table's
-- triggers', as for every enqueue. A payload over
-- job_settings.max_payload_bytes fails the statement with SQLSTATE JW413:
-- nothing is written.
-- $1 job id, $2 queue, $3 type, $4 priority, $5 payload, $6 max attempts,
-- $7 run at, $8 delay (ms), $9 traceparent, $10 tracestate, $11 tenant.
INSERT INTO jobs (job_id, queue, job_type, priority, payload, max_attempts, run_after,
                  traceparent, tracestate, tenant)
SELECT $1, $2, $3, $4, $5, $6,
       coalesce($7, now() + coalesce($8, 0) * interval '1 millisecond'),
       $9, $10, $11
FROM (SELECT coalesce(max(max_payload_bytes), 1048576) AS max_bytes FROM job_settings) l
WHERE CASE WHEN octet_length($5::text) > l.max_bytes
           THEN jobwire_reject_payload(octet_length($5::text), l.max_bytes)
           ELSE true END
RETURNING job_id, state, run_after, created_at
