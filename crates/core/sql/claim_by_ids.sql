-- Wake-up claim: claim exactly the named jobs that are claimable and due,
-- belong to one of the queues the caller serves ($4) and whose queue is not
-- paused. Returns one row per distinct requested id: `claimed` with the
-- claimed row's columns, or what this statement saw so the caller can say
-- why not (unknown, already held, finished, another queue's job, paused,
-- not yet due, or taken by a concurrent claimer at this very moment).
-- $2 lease owner, $3 lease duration in milliseconds, $4 the served queues.
-- A job of a tenant on a queue with tenant caps is not claimed here
-- (`seen_capped`): the caller hands those to jobwire_claim_ids_capped,
-- which claims only into the tenant's slots.
WITH wanted AS (
    SELECT DISTINCT unnest($1::uuid[]) AS job_id
),
lockable AS (
    SELECT j.job_id
    FROM jobs j
    JOIN wanted w ON w.job_id = j.job_id
    -- Not `j.state IN (...)`: that would let the planner look the ids up
    -- by scanning a whole claimable index (migration
    -- 20261201000011_claim_by_id_uses_the_key.sql); this says the same
    -- and leaves only the primary key.
    WHERE (j.state || '') IN ('QUEUED', 'RETRY_WAIT')
      AND j.run_after <= now()
      -- Written so no index can serve it: with `j.queue = ANY($4)` the
      -- planner may walk the queue's whole claimable backlog
      -- (jobs_claimable_idx) for every claim instead of looking up the few
      -- named ids by primary key (measured: 112 ms instead of 4 ms per claim
      -- with 10,000 jobs queued).
      AND array_position($4::text[], j.queue) IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM job_queues q
                      WHERE q.queue = j.queue
                        AND (q.paused OR (q.tenant_capped AND j.tenant IS NOT NULL)))
    FOR UPDATE OF j SKIP LOCKED
),
claimed AS (
    UPDATE jobs j
    SET state = 'RUNNING',
        lease_owner = $2,
        lease_expires_at = now() + $3 * interval '1 millisecond',
        lease_generation = j.lease_generation + 1,
        attempt_count = j.attempt_count + 1,
        heartbeat_at = now(),
        updated_at = now()
    FROM lockable
    WHERE j.job_id = lockable.job_id
    RETURNING j.*
)
SELECT w.job_id AS requested_job_id,
       c.job_id IS NOT NULL AS claimed,
       seen.state AS seen_state,
       seen.run_after AS seen_run_after,
       seen.queue AS seen_queue,
       coalesce(seen_queue.paused, false) AS seen_paused,
       coalesce(seen_queue.tenant_capped AND seen.tenant IS NOT NULL, false) AS seen_capped,
       c.queue, c.job_type, c.priority, c.payload::text AS payload, c.attempt_count, c.max_attempts,
       c.run_after, c.lease_owner, c.lease_expires_at, c.lease_generation, c.created_at,
       c.traceparent, c.tracestate
FROM wanted w
LEFT JOIN claimed c ON c.job_id = w.job_id
LEFT JOIN jobs seen ON seen.job_id = w.job_id
LEFT JOIN job_queues seen_queue ON seen_queue.queue = seen.queue
