-- The flat-cost prefill in docs/benchmarks.md: 1,000,000 finished jobs of
-- another queue in the table named by the psql variable `table` (jobs or
-- jobs_history), then vacuumed, analyzed and checkpointed:
--   psql "$DATABASE_URL" -v table=jobs -f docs/bench/flat-cost-fill.sql
INSERT INTO :"table" (job_id, queue, job_type, payload, state, attempt_count, lease_generation,
                      finished_at, created_at, updated_at)
SELECT gen_random_uuid(), 'old', 'bench_noop', jsonb_build_object('i', i), 'SUCCEEDED', 1, 1,
       now() - interval '1 hour', now() - interval '2 hours', now() - interval '1 hour'
FROM generate_series(1, 1000000) i;
VACUUM ANALYZE :"table";
CHECKPOINT;
