-- The stored outcome of an effect that was already done.
SELECT outcome FROM job_effects WHERE effect_key = $1
