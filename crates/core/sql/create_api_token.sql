-- A new API token; only the SHA-256 of its secret is stored.
INSERT INTO job_api_tokens (token_id, name, scope, secret_sha256, tenant)
VALUES ($1, $2, $3, $4, $5)
RETURNING token_id, name, scope, tenant, created_at, revoked_at
