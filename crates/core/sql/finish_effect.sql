-- Store the outcome of an effect claimed by begin_effect in this transaction.
UPDATE job_effects SET outcome = $2 WHERE effect_key = $1
