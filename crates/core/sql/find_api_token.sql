-- A live token by its public id, with the hash its secret must match.
SELECT token_id, name, scope, tenant, created_at, revoked_at, secret_sha256
FROM job_api_tokens
WHERE token_id = $1 AND revoked_at IS NULL
