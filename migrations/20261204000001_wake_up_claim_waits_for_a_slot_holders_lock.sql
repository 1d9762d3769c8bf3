-- jobwire schema: a broker wake-up for a job that was handed a tenant slot
-- waits for the job's row lock instead of skipping the job.
--
-- A capped tenant's waiting job on a broker queue gets exactly one wake-up
-- when a slot is handed to it. The wake-up claim locked the job with SKIP
-- LOCKED and reported any job it could not lock as `capped`, and the
-- consumer acked the delivery. But the lock may be held by a transaction
-- that does not want the job: a concurrent completion looking for its
-- tenant's next job under a snapshot taken before this job got its slot
-- locks the row, then finds on a second look that the job holds a slot and
-- passes it over. PostgreSQL keeps such a lock until that transaction ends.
-- The wake-up was then spent, and the job held its slot with no wake-up
-- left: it waited for the safety net (docs/tenants.md), or forever in a
-- process without one.
--
-- Now a job that cannot be locked at once and holds a slot is waited for
-- (most holders are single statements), then checked again under the
-- lock: still waiting, it is claimed; taken meanwhile, it is reported as
-- before. The ids are visited in order, so two wake-up claims waiting for
-- each other's jobs take their locks in one order. The wait is bounded
-- (1 s), since a lock can be held longer: a producer's open transaction
-- whose enqueue handed out a free slot and passed this job over, a slow
-- commit, a row edited by hand, or a deadlock with a completion (the
-- bound ends it before PostgreSQL's deadlock check would). A claim that
-- gives up writes the job a fresh wake-up (reason `slot`) in its own
-- transaction, so the job is tried again after the relay's round and is
-- never left holding a slot without one: at worst, one wake-up a second
-- while the lock is held.

CREATE OR REPLACE FUNCTION jobwire_claim_ids_capped(p_ids uuid[], p_owner text, p_lease_ms bigint,
                                         p_queues text[])
RETURNS SETOF jobs
LANGUAGE plpgsql AS $$
DECLARE
    id          uuid;
    job         jobs%ROWTYPE;
    cap         integer;
    taken       integer;
    locked      boolean;
    prior_limit text;
BEGIN
    FOR id IN SELECT DISTINCT u FROM unnest(p_ids) AS u ORDER BY u LOOP
        SELECT j.* INTO job
        FROM jobs j
        WHERE j.job_id = id
          -- Not `j.state IN (...)`: see migration 20261201000011.
          AND (j.state || '') IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
          AND array_position(p_queues, j.queue) IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM job_queues q WHERE q.queue = j.queue AND q.paused)
        FOR UPDATE OF j SKIP LOCKED;
        locked := FOUND;
        IF NOT locked THEN
            -- Only a job handed a slot is waited for: one without a slot
            -- is some other claimer's, or waits for a hand-over anyway.
            prior_limit := current_setting('lock_timeout');
            BEGIN
                PERFORM set_config('lock_timeout', '1s', true);
                SELECT j.* INTO job
                FROM jobs j
                WHERE j.job_id = id
                  AND (j.state || '') IN ('QUEUED', 'RETRY_WAIT') AND j.run_after <= now()
                  AND j.tenant_slot IS NOT NULL
                  AND array_position(p_queues, j.queue) IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM job_queues q
                                  WHERE q.queue = j.queue AND q.paused)
                FOR UPDATE OF j;
                locked := FOUND;
                PERFORM set_config('lock_timeout', prior_limit, true);
            EXCEPTION WHEN lock_not_available THEN
                -- The block's setting is undone with it. The job keeps
                -- its slot, so it gets its wake-up again.
                locked := false;
                INSERT INTO job_outbox (topic, message_key, payload, headers)
                SELECT q.topic, j.job_id::text, w.payload, w.headers
                FROM jobs j
                JOIN job_queues q ON q.queue = j.queue AND q.dispatch = 'broker'
                CROSS JOIN LATERAL jobwire_wake_up(j.job_id, j.lease_generation, j.queue,
                                                   j.job_type, 'slot', j.traceparent,
                                                   j.tracestate) w
                WHERE j.job_id = id AND j.tenant_slot IS NOT NULL
                  AND (j.state || '') IN ('QUEUED', 'RETRY_WAIT');
            END;
        END IF;
        CONTINUE WHEN NOT locked;
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
