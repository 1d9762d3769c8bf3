-- Outbox dead letters (rows the relay moved aside after bounded attempts),
-- grouped by topic and last error: how many, when the first and last failed.
SELECT topic,
       coalesce(last_error, '') AS last_error,
       count(*) AS count,
       min(failed_at) AS first_failed_at,
       max(failed_at) AS last_failed_at
FROM job_outbox_dead
GROUP BY topic, coalesce(last_error, '')
ORDER BY count(*) DESC, topic
