-- A dashboard session for the live token $1: the SHA-256 of its secret ($2),
-- valid for $3 seconds. Sessions already expired are deleted on the way, so
-- the table holds no more than the sessions that could still be used.
WITH expired AS (
    DELETE FROM job_ui_sessions WHERE expires_at < now()
)
INSERT INTO job_ui_sessions (session_sha256, token_id, expires_at)
SELECT $2, token_id, now() + $3 * interval '1 second'
FROM job_api_tokens
WHERE token_id = $1 AND revoked_at IS NULL
RETURNING expires_at
