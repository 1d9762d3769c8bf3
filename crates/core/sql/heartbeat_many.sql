-- Extend the leases a worker holds, fenced by (job_id, lease_owner,
-- lease_generation). A lease missing from the result was lost. The returned
-- state tells the worker whether a cancel was requested.
-- $1 job ids, $2 generations, $3 lease owner, $4 new lease duration in ms.
UPDATE jobs j
SET lease_expires_at = now() + $4 * interval '1 millisecond',
    heartbeat_at = now()
FROM unnest($1::uuid[], $2::bigint[]) AS held(job_id, lease_generation)
WHERE j.job_id = held.job_id
  AND j.lease_generation = held.lease_generation
  AND j.lease_owner = $3
  AND j.state IN ('RUNNING', 'CANCEL_REQUESTED')
RETURNING j.job_id, j.state, j.lease_expires_at
