-- After a drain (docs/bench/drain-cpu-by-hand.sh leaves its table): how
-- many jobs each claim and each completion statement took. A claim's jobs
-- share its heartbeat_at, a completion's their finished_at (each is the
-- statement's transaction time). Gap: the mean time from one statement of
-- the kind to the next, in ms.
WITH claims AS (SELECT heartbeat_at AS at, count(*) AS n FROM jobs GROUP BY 1),
     completions AS (SELECT finished_at AS at, count(*) AS n FROM jobs GROUP BY 1)
SELECT 'claim' AS statement, count(*) AS statements, round(avg(n)) AS mean_jobs,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY n) AS median_jobs,
       count(*) FILTER (WHERE n >= 500) AS at_500,
       round((extract(epoch FROM max(at) - min(at)) * 1000 / greatest(count(*) - 1, 1))::numeric, 2) AS gap_ms
FROM claims
UNION ALL
SELECT 'completion', count(*), round(avg(n)),
       percentile_disc(0.5) WITHIN GROUP (ORDER BY n),
       count(*) FILTER (WHERE n >= 500),
       round((extract(epoch FROM max(at) - min(at)) * 1000 / greatest(count(*) - 1, 1))::numeric, 2)
FROM completions;
