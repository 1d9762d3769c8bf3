-- jobwire schema, part 3: what broker consumers need.

-- Idempotent effects: a handler records each side effect under a key derived
-- from the job and the operation, in the same transaction as the effect
-- itself (and, if it likes, the fenced completion). A repeat finds the key
-- and gets the stored outcome instead of doing the effect again.
CREATE TABLE job_effects (
    effect_key  text PRIMARY KEY CHECK (effect_key <> ''),
    job_id      uuid NOT NULL,
    outcome     jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_effects_job_idx ON job_effects (job_id);
