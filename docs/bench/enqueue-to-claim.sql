-- The by-hand scripts' summary: a queue's jobs' enqueue -> claim time
-- (created_at -> heartbeat_at, the claim's now(); for no-op jobs, which
-- send no heartbeat, that is the claim), over every job claimed, or over
-- those of one job type (a job that sends heartbeats moves its
-- heartbeat_at, so leave such jobs out):
--   psql "$DATABASE_URL" -v queue=NAME [-v job_type=TYPE] -f docs/bench/enqueue-to-claim.sql
\if :{?job_type}
\else
\set job_type ''
\endif
SELECT count(*) AS jobs,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p50_ms,
       round(percentile_cont(0.95) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p95_ms,
       round(max(ms)::numeric, 1) AS max_ms
FROM (SELECT extract(epoch FROM heartbeat_at - created_at) * 1000 AS ms
      FROM jobs
      WHERE queue = :'queue' AND heartbeat_at IS NOT NULL
        AND (:'job_type' = '' OR job_type = :'job_type')) t;
