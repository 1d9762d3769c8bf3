-- Every token, live ones first, newest first; never the secret's hash.
SELECT token_id, name, scope, tenant, created_at, revoked_at
FROM job_api_tokens
ORDER BY revoked_at IS NOT NULL, created_at DESC
