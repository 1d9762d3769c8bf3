-- How a queue is dispatched (no row: the PostgreSQL path).
SELECT dispatch, topic FROM job_queues WHERE queue = $1
