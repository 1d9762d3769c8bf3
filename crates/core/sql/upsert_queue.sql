-- Declare how a queue is dispatched: 'postgres' (SKIP LOCKED workers, NOTIFY)
-- or 'broker' (wake-ups through job_outbox on `topic`).
--
-- A queue moved to the PostgreSQL path gives back the tenant slots its
-- waiting jobs were handed: on a broker queue a completion hands a capped
-- tenant's freed slot to its next job along with that job's wake-up, and
-- the PostgreSQL path's claim takes only jobs without a slot, so such a
-- job would wait for ever with the slot held. Each such job is locked
-- first (a claim taking it meanwhile is waited for, and the job is then
-- left alone, running with its slot). A broker completion that runs
-- beside this statement can still hand a slot after it: move a queue back
-- once its broker workers have stopped (docs/operations.md); declaring
-- the PostgreSQL path again gives such a slot back.
WITH declared AS (
    INSERT INTO job_queues (queue, dispatch, topic)
    VALUES ($1, $2, $3)
    ON CONFLICT (queue) DO UPDATE
    SET dispatch = excluded.dispatch, topic = excluded.topic, updated_at = now()
    RETURNING queue, dispatch
),
handed AS MATERIALIZED (
    SELECT j.job_id, s.tenant, s.slot
    FROM declared d
    JOIN job_tenant_slots s ON s.queue = d.queue AND s.job_id IS NOT NULL
    JOIN jobs j ON j.job_id = s.job_id
    WHERE d.dispatch = 'postgres' AND j.state IN ('QUEUED', 'RETRY_WAIT')
    FOR UPDATE OF j
),
freed AS (
    UPDATE job_tenant_slots s
    SET job_id = NULL
    FROM handed h
    WHERE s.queue = $1 AND s.tenant = h.tenant AND s.slot = h.slot AND s.job_id = h.job_id
    RETURNING 1
)
UPDATE jobs j
SET tenant_slot = NULL
FROM handed h
WHERE j.job_id = h.job_id
