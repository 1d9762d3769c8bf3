-- jobwire schema: the operator dashboard's browser sessions.
--
-- A person logs in to /ui once with an API token; the browser then carries a
-- random session secret in an HttpOnly cookie instead of the token itself.
-- Only a SHA-256 of that secret is kept (it is random, so a plain hash keeps
-- a copy of this table from being a copy of the sessions). A session acts
-- with its token's name and scope, ends at logout or expiry, and ends with
-- its token: revoking the token ends every session opened with it.
CREATE TABLE job_ui_sessions (
    session_sha256  bytea PRIMARY KEY CHECK (octet_length(session_sha256) = 32),
    token_id        text NOT NULL REFERENCES job_api_tokens (token_id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);
-- Expired sessions are deleted by the next login (see create_ui_session.sql).
CREATE INDEX job_ui_sessions_expires_idx ON job_ui_sessions (expires_at);
