-- The token behind a live dashboard session: the session has not expired
-- and its token has not been revoked.
SELECT t.token_id, t.name, t.scope, t.tenant, t.created_at, t.revoked_at
FROM job_ui_sessions s
JOIN job_api_tokens t ON t.token_id = s.token_id
WHERE s.session_sha256 = $1
  AND s.expires_at > now()
  AND t.revoked_at IS NULL
