-- Elect this session the database's metrics collector: a session-level
-- advisory lock, held until the session ends (a crashed collector's lock
-- goes with its connection). true: this session leads.
SELECT pg_try_advisory_lock(hashtext('jobwire.metrics_collector')::bigint)
