INSERT INTO jobs_history (job_id, queue, job_type, payload, state, attempt_count, lease_generation, finished_at, created_at, updated_at)
SELECT gen_random_uuid(), 'old', 'bench_noop', jsonb_build_object('i', i), 'SUCCEEDED', 1, 1,
       now() - interval '1 hour', now() - interval '2 hours', now() - interval '1 hour'
FROM generate_series(1, 1000000) i;
VACUUM ANALYZE jobs_history;
CHECKPOINT;
