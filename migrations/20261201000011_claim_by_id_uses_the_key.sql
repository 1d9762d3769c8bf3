-- jobwire schema: the wake-up claim looks its jobs up by primary key, always.
--
-- A wake-up claim names its jobs by id. Written as `state IN ('QUEUED',
-- 'RETRY_WAIT')`, its condition implies the predicate of the partial indexes
-- jobs_claimable_idx and jobs_tenant_claimable_idx, whose last column is
-- job_id: the planner may then look each id up by scanning a whole claimable
-- index with `job_id = $id` as a non-leading condition. It does so when the
-- table's statistics are older than its backlog (a queue that filled up
-- since the last ANALYZE: the indexes look empty, so a full scan looks as
-- cheap as a key lookup). Measured on a broker queue with 72,000 waiting
-- jobs and statistics from when it was empty: 37 ms for a claim of 20 ids
-- through jobs_tenant_claimable_idx, 0.27 ms by the primary key; the broker
-- paths drained a 100,000-job backlog at about 500 jobs/s instead of
-- thousands (docs/benchmarks.md).
--
-- `(state || '') IN (...)` means the same but proves nothing about the
-- partial indexes' predicate, so only the primary key can serve the lookup.
-- It is evaluated on the locked row, so a concurrent change is re-checked
-- as before. claim_by_ids.sql (the plain claim) is changed alike.

CREATE OR REPLACE FUNCTION jobwire_claim_ids_capped(p_ids uuid[], p_owner text, p_lease_ms bigint,
                                         p_queues text[])
RETURNS SETOF jobs
LANGUAGE plpgsql AS $$
DECLARE
    id     uuid;
    job    jobs%ROWTYPE;
    cap    integer;
    taken  integer;
BEGIN
    FOREACH id IN ARRAY p_ids LOOP
        SELECT j.* INTO job
        FROM jobs j
        WHERE j.job_id = id
          -- Not `j.state IN (...)`: see above.
          AND (j.state || '') IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
          AND array_position(p_queues, j.queue) IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM job_queues q WHERE q.queue = j.queue AND q.paused)
        FOR UPDATE OF j SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        taken := job.tenant_slot;
        IF taken IS NULL AND job.tenant IS NOT NULL THEN
            cap := jobwire_tenant_cap(job.queue, job.tenant);
            IF cap IS NOT NULL THEN
                PERFORM jobwire_ensure_tenant_slots(job.queue, job.tenant, cap);
                UPDATE job_tenant_slots s
                SET job_id = job.job_id
                WHERE (s.queue, s.tenant, s.slot) = (
                    SELECT f.queue, f.tenant, f.slot FROM job_tenant_slots f
                    WHERE f.queue = job.queue AND f.tenant = job.tenant
                      AND f.job_id IS NULL AND f.slot <= cap
                    ORDER BY f.slot LIMIT 1
                    FOR UPDATE SKIP LOCKED)
                RETURNING s.slot INTO taken;
                CONTINUE WHEN taken IS NULL;
            END IF;
        END IF;
        RETURN QUERY
        UPDATE jobs j
        SET state = 'RUNNING',
            tenant_slot = taken,
            lease_owner = p_owner,
            lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
            lease_generation = j.lease_generation + 1,
            attempt_count = j.attempt_count + 1,
            heartbeat_at = now(),
            updated_at = now()
        WHERE j.job_id = job.job_id
        RETURNING j.*;
    END LOOP;
END;
$$;
