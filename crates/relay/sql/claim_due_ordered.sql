-- Per-key ordering mode: take up to $1 due rows of the key shards this relay
-- holds ($3, out of $2 shards), in id order. A shard is drained by one relay
-- at a time (it holds the shard's advisory lock), so rows of one key are
-- published in the order they were written.
SELECT id, topic, message_key, payload::text AS payload, headers, attempts
FROM job_outbox
WHERE published_at IS NULL
  AND available_at <= now()
  AND mod(abs(hashtext(coalesce(message_key, ''))::bigint), $2) = ANY($3::bigint[])
ORDER BY id
LIMIT $1
FOR UPDATE SKIP LOCKED
