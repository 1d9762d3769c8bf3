-- Lock a job's row until the transaction ends, waiting for whoever holds
-- it. Its own statement, so that the next statement's snapshot sees the
-- version this lock holds (see request_cancel.sql).
SELECT 1 FROM jobs WHERE job_id = $1 FOR UPDATE
