-- jobwire schema: a wake-up claim that finds its job's tenant at its cap
-- hands out as its transaction commits.
--
-- Left open by migration 20261206000010: a job holding no slot whose own
-- wake-up arrives (a delayed job's, a retry's, a duplicate) is locked by
-- the wake-up claim, which finds its tenant at the cap and claims
-- nothing. Meanwhile a completion of that tenant's job looks for the
-- tenant's next waiting job, skips the one the claim has locked, and
-- frees its slot without a successor; its hand-out at commit skips the
-- job too. When the claim then commits, the job waits with a free slot
-- and no wake-up: for the reconciler's hand-out (10 s by default), or for
-- ever without a reconciler.
--
-- Now such a claim notes the tenant for a hand-out at its commit, as a
-- producer does (migration 20261206000010): it takes the tenant's
-- hand-out lock shared there, after every row lock it waits for, and
-- hands a free slot to a due job, its own locked one among them. A
-- freeing transaction's hand-out (the lock exclusive) that comes first
-- has committed by then and its slot is seen; one that comes after waits
-- for the claim's commit and then sees the job unlocked. Taking the lock
-- in the claim itself deadlocked, because the claim waits for other
-- jobs' row locks (migration 20261204000001) that a completion waiting
-- for the lock at its commit can hold; at the claim's commit nothing is
-- waited for after the lock. Only a claim that finds a tenant capped
-- pays for it.

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
    capped_q    text[] := '{}';
    capped_t    text[] := '{}';
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
                IF taken IS NULL THEN
                    capped_q := capped_q || job.queue;
                    capped_t := capped_t || job.tenant;
                    CONTINUE;
                END IF;
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
    -- Noted after the loop, not in it: with SET CONSTRAINTS ALL IMMEDIATE
    -- the note hands out at once and holds the hand-out locks, and the
    -- loop may still wait for a row lock.
    IF cardinality(capped_q) > 0 THEN
        PERFORM jobwire_note_hand_out(capped_q, capped_t, false);
    END IF;
END;
$$;
