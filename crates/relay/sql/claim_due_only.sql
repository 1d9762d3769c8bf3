-- A dedicated lane: take up to $1 due rows of the topics in $2, oldest due
-- first, skipping rows other relays hold. Served by job_outbox_topic_due_idx,
-- so a bulk backlog on other topics costs this lane nothing.
SELECT id, topic, message_key, payload::text AS payload, headers, attempts
FROM job_outbox
WHERE published_at IS NULL
  AND available_at <= now()
  AND topic = ANY($2::text[])
ORDER BY available_at, id
LIMIT $1
FOR UPDATE SKIP LOCKED
