-- How many jobs had a lease expire (their worker died or froze and the
-- sweeper returned them) in the last $1 seconds, hot table and history
-- together, through the partial lease_expired_at indexes.
SELECT (SELECT count(*) FROM jobs
        WHERE lease_expired_at >= now() - $1 * interval '1 second')
     + (SELECT count(*) FROM jobs_history
        WHERE lease_expired_at >= now() - $1 * interval '1 second') AS expiries
