-- Move up to $4 outbox dead letters back into job_outbox, due now with a
-- fresh attempt budget, and record each move in job_outbox_audit — all in
-- one statement. Filters: topic $1, a beginning of the last error $2 (the
-- whole error, as outbox_dead_groups.sql shows it, or its first words), ids
-- $3 (NULL: any).
-- $5 actor, $6 reason. Returns the ids moved back (each keeps its id, so a
-- consumer deduplicating on jobwire-outbox-id still recognises it).
WITH picked AS (
    SELECT id
    FROM job_outbox_dead
    WHERE ($1::text IS NULL OR topic = $1)
      AND ($2::text IS NULL OR starts_with(coalesce(last_error, ''), $2))
      AND ($3::bigint[] IS NULL OR id = ANY($3))
    ORDER BY id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
),
moved AS (
    DELETE FROM job_outbox_dead d
    USING picked p
    WHERE d.id = p.id
    RETURNING d.id, d.topic, d.message_key, d.payload, d.headers, d.last_error, d.created_at
),
requeued AS (
    INSERT INTO job_outbox (id, topic, message_key, payload, headers, available_at, created_at)
    SELECT id, topic, message_key, payload, headers, now(), created_at
    FROM moved
    ON CONFLICT (id) DO NOTHING
    RETURNING id
),
audited AS (
    INSERT INTO job_outbox_audit (outbox_id, topic, action, actor, reason, last_error)
    SELECT m.id, m.topic, 'replay', $5, $6, m.last_error
    FROM moved m
)
SELECT id FROM requeued
