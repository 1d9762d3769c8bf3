-- An enqueue under a tenant's rate with many counter rows of sessions long
-- gone (docs/benchmarks.md, "A tenant's enqueue rate read every session's
-- counter row"). Run on a scratch database with every migration applied:
--   psql -d scratch -v stale=200000 -f docs/bench/enqueue-rate-stale-rows.sql
-- It prints the time of five enqueues with no stale row, five with
-- :stale rows left by sessions a day ago, and, if the index of migration
-- 20261207000001 is present, five more with it dropped. Everything is
-- rolled back.
\timing off
BEGIN;
INSERT INTO job_queues (queue, tenant_rate_jobs, tenant_rate_seconds)
VALUES ('rate-bench', 1000000, 60)
ON CONFLICT (queue) DO UPDATE SET tenant_rate_jobs = 1000000, tenant_rate_seconds = 60;
SELECT jobwire_refresh_enqueue_limited('rate-bench');
COMMIT;

CREATE TEMP TABLE timings (variant text, ms double precision);
CREATE FUNCTION pg_temp.time_enqueues(p_variant text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    started timestamptz;
BEGIN
    FOR i IN 1..5 LOOP
        started := clock_timestamp();
        PERFORM jobwire_enqueue('rate-bench-job', '{}', 'rate-bench', tenant => 'acme');
        INSERT INTO timings VALUES (p_variant, extract(epoch FROM clock_timestamp() - started) * 1000);
    END LOOP;
END;
$$;

BEGIN;
SELECT pg_temp.time_enqueues('no stale row');
INSERT INTO job_enqueue_counts (queue, tenant, backend, window_start, count, previous)
SELECT 'rate-bench', 'acme', -i, now() - interval '1 day', 3, 2
FROM generate_series(1, :stale) i;
ANALYZE job_enqueue_counts;
SELECT pg_temp.time_enqueues(:'stale' || ' stale rows');
DROP INDEX IF EXISTS job_enqueue_counts_window_idx;
SELECT pg_temp.time_enqueues(:'stale' || ' stale rows, no window index');
SELECT variant, round(min(ms)::numeric, 2) AS min_ms,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2) AS median_ms,
       round(max(ms)::numeric, 2) AS max_ms
FROM timings GROUP BY variant ORDER BY min(ms);
ROLLBACK;
DELETE FROM job_queues WHERE queue = 'rate-bench';
