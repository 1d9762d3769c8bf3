-- Revoke the live token called $1. Returns its id (no row: none is live).
UPDATE job_api_tokens
SET revoked_at = now()
WHERE name = $1 AND revoked_at IS NULL
RETURNING token_id
