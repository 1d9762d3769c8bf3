-- Wake what a committed change of queue $1's caps on running jobs freed
-- (tenant $2's own cap, or with a NULL $2 the queue's default), in a
-- statement of its own after that change's commit, as a resume wakes its
-- queue (resume_queue.sql says why): the claims that run from then on see
-- the new caps.
-- * On a broker queue a capped tenant's waiting jobs get their wake-ups
--   only with a slot, so they had none. When the change left tenants with
--   no cap at all ($3), each of their due jobs that holds no slot gets a
--   wake-up now, its `updated_at` stamped with it: the reconciler re-wakes
--   a job one grace period after its last change, and would otherwise
--   write a second wake-up for every job of a backlog older than that. And
--   every capped tenant's free slots, the ones a raised cap adds among
--   them, go to its due jobs now (its slot rows made first). Without this,
--   both waited for the reconciler.
-- * A PostgreSQL-path queue gets a NOTIFY: its workers claim at once.
-- A paused queue is left to its resume, which wakes it. Returns how many
-- broker wake-ups were written; no row when the queue is paused or unknown.
-- A tenant is uncapped when neither its own cap nor the queue's default is
-- set (jobwire_tenant_cap, read here once for the default rather than per
-- row).
WITH changed AS (
    SELECT queue, dispatch, topic, tenant_max_running FROM job_queues
    WHERE queue = $1 AND NOT paused
),
uncapped AS (
    UPDATE jobs j SET updated_at = now()
    FROM changed c
    WHERE j.queue = c.queue
      AND c.dispatch = 'broker' AND $3::boolean AND c.tenant_max_running IS NULL
      AND j.state IN ('QUEUED', 'RETRY_WAIT')
      AND j.run_after <= now()
      AND j.tenant IS NOT NULL AND ($2::text IS NULL OR j.tenant = $2::text)
      AND j.tenant_slot IS NULL
      AND NOT EXISTS (SELECT 1 FROM job_tenants t
                      WHERE t.queue = j.queue AND t.tenant = j.tenant
                        AND t.max_running IS NOT NULL)
    RETURNING j.job_id, j.lease_generation, j.queue, j.job_type, j.traceparent, j.tracestate,
              c.topic
),
woken AS (
    INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
    SELECT u.topic, u.job_id::text, w.payload, w.headers, now()
    FROM uncapped u
    CROSS JOIN LATERAL jobwire_wake_up(u.job_id, u.lease_generation, u.queue, u.job_type, 'cap',
                                     u.traceparent, u.tracestate) w
    RETURNING 1
),
-- After the row writes above: the hand-out holds tenants' hand-out locks
-- until the commit, and a transaction holding one must not wait for a row
-- lock (migration 20261206000010).
handed AS (
    SELECT jobwire_hand_out_to_waiting_tenants(ARRAY[c.queue], 'cap') AS woken
    FROM changed c, (SELECT count(*) FROM woken) written
    WHERE c.dispatch = 'broker'
)
SELECT (SELECT count(*) FROM woken) + coalesce((SELECT woken FROM handed), 0) AS woken
FROM changed c
LEFT JOIN LATERAL (SELECT pg_notify('jobwire_jobs', c.queue) WHERE c.dispatch = 'postgres') n ON true
