-- Lock schedule $1's row until the transaction ends, waiting for whoever
-- holds it (a scheduler firing it, another change), and read its cron,
-- zone and whether it is paused as that lock holds them. A change that computes a time from them
-- and from the clock reads the clock after this, in a statement of its
-- own (clock_timestamp(): now() is when the transaction began, before the
-- wait), so that what it stores follows from the cron it stores beside,
-- and is later than any occurrence a scheduler fired before the lock.
SELECT cron, timezone, paused FROM job_schedules WHERE name = $1 FOR UPDATE
