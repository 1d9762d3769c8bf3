-- Take back, after a committed cut of queue $1's cap on running jobs
-- (tenant $2's own, or with a NULL $2 the queue's default), the slots
-- numbered above a tenant's cap now that were handed to waiting jobs: on a
-- broker queue a freed slot goes to the next waiting job, which holds it
-- while its wake-up travels, and would start over the new cap when that
-- wake-up arrives. Each such job gives its slot back and waits, without a
-- slot, for one to free under the new cap; its wake-up then finds no slot
-- and misses (`capped`). Returns how many were taken back.
-- Hand-outs, completions and claims take only slots at or below the cap
-- in force, so none takes these again (but a completion whose statement
-- began before the cut committed, which read the old cap). This runs once:
-- a job whose row is locked now (being claimed at this instant, or passed
-- over by a concurrent completion) is skipped, as the reconciler's release
-- of handed slots skips it (jobwire_release_handed_slots), and starts with
-- its slot, like the jobs already running above the cap. Rows are taken in
-- the same order as that release: the job first, then its slot.
WITH handed AS MATERIALIZED (
    SELECT j.job_id, s.queue, s.tenant, s.slot
    FROM job_tenant_slots s
    JOIN jobs j ON j.job_id = s.job_id AND j.tenant_slot = s.slot
    CROSS JOIN LATERAL (SELECT jobwire_tenant_cap(s.queue, s.tenant) AS cap) c
    WHERE s.queue = $1 AND ($2::text IS NULL OR s.tenant = $2::text)
      AND s.job_id IS NOT NULL
      AND j.state IN ('QUEUED', 'RETRY_WAIT')
      -- An uncapped tenant (no cap in force) has nothing above a cap.
      AND c.cap IS NOT NULL AND s.slot > c.cap
    ORDER BY j.job_id
    FOR UPDATE OF j SKIP LOCKED
),
freed AS (
    UPDATE job_tenant_slots s
    SET job_id = NULL
    FROM handed h
    WHERE s.queue = h.queue AND s.tenant = h.tenant AND s.slot = h.slot
      AND s.job_id = h.job_id
    RETURNING h.job_id, h.slot
),
cleared AS (
    UPDATE jobs j
    SET tenant_slot = NULL
    FROM freed f
    WHERE j.job_id = f.job_id AND j.tenant_slot = f.slot
    RETURNING 1
)
SELECT count(*) FROM cleared
