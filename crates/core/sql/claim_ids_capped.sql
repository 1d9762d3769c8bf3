-- The wake-up claim of jobs of capped tenants (see claim_by_ids.sql): each
-- claims with the slot it was handed or a free slot of its tenant, or is
-- left waiting. $1 job ids, $2 lease owner, $3 lease ms, $4 served queues.
-- The columns the worker reads, by name (see claim_batch.sql).
SELECT job_id, queue, job_type, priority, payload::text AS payload, attempt_count, max_attempts, run_after,
       lease_expires_at, lease_generation, created_at, traceparent, tracestate
FROM jobwire_claim_ids_capped($1, $2, $3, $4)
