-- Claim an effect key for a job. A row comes back only when this call
-- created the key; a concurrent holder makes this wait until it commits
-- (then nothing comes back) or rolls back (then the key is ours).
INSERT INTO job_effects (effect_key, job_id)
VALUES ($1, $2)
ON CONFLICT (effect_key) DO NOTHING
RETURNING effect_key
