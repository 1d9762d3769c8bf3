-- Dead and live tuples of the hot tables and when autovacuum last cleaned
-- them: bloat is the most common way a table-backed queue degrades.
SELECT relname::text AS table_name,
       n_live_tup AS live_tuples,
       n_dead_tup AS dead_tuples,
       extract(epoch FROM last_autovacuum)::float8 AS last_autovacuum_s
FROM pg_stat_user_tables
WHERE relid IN ('jobs'::regclass, 'job_outbox'::regclass, 'jobs_history'::regclass)
ORDER BY 1
