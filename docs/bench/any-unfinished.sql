-- Whether any job is unfinished: the by-hand scripts run this every 0.1 s
-- to find a drain's end (`t` or `f`). Answered from the partial indexes
-- that hold only unfinished rows, with sequential scans off: the planner's
-- statistics, taken while every job was queued, make a scan of the whole
-- table look cheaper, and `count(*) ... WHERE state <> 'SUCCEEDED'` read
-- every finished row; either took most of a core from the drain being timed.
SET enable_seqscan = off;
SET max_parallel_workers_per_gather = 0;
SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('QUEUED', 'RETRY_WAIT'))
    OR EXISTS (SELECT 1 FROM jobs WHERE state IN ('RUNNING', 'CANCEL_REQUESTED'));
