-- Wake the waiting jobs of queue $1, once its resume has committed
-- (set_queue_paused.sql, by `resume_queue` just before): wake-ups that
-- arrived while it was paused were acknowledged as misses, so every due
-- claimable job of a broker-dispatched queue gets a fresh wake-up now (jobs
-- not yet due still have theirs in the outbox), and a PostgreSQL-path
-- queue gets a NOTIFY. Returns how many jobs were woken.
-- Run after the resume's commit, in a statement of its own, this sees
-- every job whose wake-up a consumer found the queue paused for: the
-- claim that found it paused came before the resume's commit, and its job
-- was committed before that claim. As one statement with the resume, it
-- read the jobs as they were when it began, and a job enqueued (or
-- retried, or swept) while it ran had its wake-up acknowledged as a
-- paused queue's and none from the resume (a resume of 20,000 waiting
-- jobs takes about a second).
-- A capped tenant's jobs are woken only with a slot: those handed one
-- before the pause, and those its free slots are handed to now (its slot
-- rows made first if it has none). A job that
-- held its slot through the pause has its `updated_at` stamped with the new
-- wake-up, as a hand-over does: the broker path's safety net times a slot
-- holder from it, and would otherwise take the job ahead of its wake-up
-- after a pause longer than its bound (and log it as lost).
WITH resumed AS (
    SELECT queue, dispatch, topic FROM job_queues WHERE queue = $1 AND NOT paused
),
woken AS (
    INSERT INTO job_outbox (topic, message_key, payload, headers, available_at)
    SELECT r.topic, j.job_id::text, w.payload, w.headers, now()
    FROM resumed r
    JOIN jobs j ON j.queue = r.queue
    CROSS JOIN LATERAL jobwire_wake_up(j.job_id, j.lease_generation, j.queue, j.job_type, 'resume',
                                     j.traceparent, j.tracestate) w
    WHERE r.dispatch = 'broker'
      AND j.state IN ('QUEUED', 'RETRY_WAIT')
      AND j.run_after <= now()
      AND (j.tenant IS NULL OR j.tenant_slot IS NOT NULL
           OR jobwire_tenant_cap(j.queue, j.tenant) IS NULL)
    RETURNING 1
),
restamped AS (
    UPDATE jobs j SET updated_at = now()
    FROM resumed r
    WHERE j.queue = r.queue AND r.dispatch = 'broker'
      AND j.state IN ('QUEUED', 'RETRY_WAIT')
      AND j.run_after <= now()
      AND j.tenant_slot IS NOT NULL
    RETURNING 1
),
-- After the row writes above: the hand-out holds tenants' hand-out locks
-- until the commit, and a transaction holding one must not wait for a row
-- lock (migration 20261206000010).
handed AS (
    SELECT jobwire_hand_out_to_waiting_tenants(ARRAY[$1::text], 'resume') AS woken
    FROM (SELECT count(*) FROM restamped) written
)
SELECT (SELECT count(*) FROM woken) + coalesce((SELECT woken FROM handed), 0) AS woken
FROM resumed r
LEFT JOIN LATERAL (SELECT pg_notify('jobwire_jobs', r.queue) WHERE r.dispatch = 'postgres') n ON true
