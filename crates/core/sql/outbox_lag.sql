-- Outbox lag: age in milliseconds of the oldest due, unpublished row that no
-- relay is holding (0 when none). Rows locked by a relay that is stuck
-- mid-publish are skipped: they say nothing about whether the relays that
-- are working keep up.
SELECT coalesce((
    SELECT (extract(epoch FROM now() - available_at) * 1000)::bigint
    FROM job_outbox
    WHERE published_at IS NULL AND available_at <= now()
    ORDER BY available_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), 0)
