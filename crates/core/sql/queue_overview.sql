-- Every queue -- declared in job_queues or holding jobs -- with its dispatch,
-- pause, depth by state (hot table) and the age of its oldest runnable job
-- (due and claimable: how long the longest-waiting job has been waiting),
-- and its held leases that have expired with no sweep yet (a worker died or
-- froze). Reads take no row locks, so rows a stuck worker holds count too.
WITH depth AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'QUEUED') AS queued,
           count(*) FILTER (WHERE state = 'RUNNING') AS running,
           count(*) FILTER (WHERE state = 'RETRY_WAIT') AS retry_wait,
           count(*) FILTER (WHERE state = 'CANCEL_REQUESTED') AS cancel_requested,
           count(*) FILTER (WHERE state = 'SUCCEEDED') AS succeeded,
           count(*) FILTER (WHERE state = 'FAILED') AS failed,
           count(*) FILTER (WHERE state = 'CANCELLED') AS cancelled,
           count(*) FILTER (WHERE state IN ('RUNNING', 'CANCEL_REQUESTED')
                              AND lease_expires_at < now()) AS lease_expired,
           -- A job cannot have waited from before it was written: one
           -- enqueued with a run-at in the past waits from its enqueue.
           min(greatest(run_after, created_at))
               FILTER (WHERE state IN ('QUEUED', 'RETRY_WAIT') AND run_after <= now())
               AS oldest_runnable_since
    FROM jobs
    GROUP BY queue
)
SELECT coalesce(q.queue, d.queue) AS queue,
       coalesce(q.dispatch, 'postgres') AS dispatch,
       q.topic,
       coalesce(q.paused, false) AS paused,
       coalesce(d.queued, 0) AS queued,
       coalesce(d.running, 0) AS running,
       coalesce(d.retry_wait, 0) AS retry_wait,
       coalesce(d.cancel_requested, 0) AS cancel_requested,
       coalesce(d.succeeded, 0) AS succeeded,
       coalesce(d.failed, 0) AS failed,
       coalesce(d.cancelled, 0) AS cancelled,
       coalesce(d.lease_expired, 0) AS lease_expired,
       extract(epoch FROM now() - d.oldest_runnable_since)::float8 AS oldest_runnable_age_s
FROM job_queues q
FULL JOIN depth d ON d.queue = q.queue
ORDER BY 1
