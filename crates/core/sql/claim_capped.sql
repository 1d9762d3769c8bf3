-- The claim of a queue with tenant caps (migration 20261201000009): tenants
-- take turns at equal priority, and a capped tenant's jobs start only into
-- its free slots. Same parameters as claim_batch.sql.
-- The columns the worker reads, by name (see claim_batch.sql).
SELECT job_id, queue, job_type, priority, payload::text AS payload, attempt_count, max_attempts, run_after,
       lease_expires_at, lease_generation, created_at, traceparent, tracestate
FROM jobwire_claim_capped($1, $2::integer, $3, $4, $5)
