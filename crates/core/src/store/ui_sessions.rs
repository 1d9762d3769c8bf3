//! Dashboard sessions: a browser logs in once with an API token and then
//! carries a random session secret in a cookie, so the token itself never
//! sits in the browser. The database keeps a SHA-256 of each secret; a
//! session acts with its token's name and scope and dies with the token.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::RngCore;
use sqlx::PgExecutor;

use super::tokens::{TokenRow, sha256};
use crate::{ApiToken, Result};

/// A session just opened: the secret for the cookie (not stored anywhere)
/// and when it stops working.
pub struct OpenedUiSession {
    /// 64 hex digits (32 random bytes). Only its SHA-256 is stored.
    pub secret: String,
    /// When the session expires, by the database clock.
    pub expires_at: DateTime<Utc>,
}

/// Open a session for `token` lasting `ttl`; `None` when the token was
/// revoked in the meantime. Deletes expired sessions on the way.
pub async fn create_ui_session<'c, E: PgExecutor<'c>>(
    executor: E,
    token: &ApiToken,
    ttl: Duration,
) -> Result<Option<OpenedUiSession>> {
    let mut secret_bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut secret_bytes);
    let secret = hex::encode(secret_bytes);
    let expires_at: Option<DateTime<Utc>> =
        sqlx::query_scalar(include_str!("../../sql/create_ui_session.sql"))
            .bind(&token.token_id)
            .bind(&sha256(&secret)[..])
            .bind(ttl.as_secs_f64())
            .fetch_optional(executor)
            .await?;
    Ok(expires_at.map(|expires_at| OpenedUiSession { secret, expires_at }))
}

/// The live token behind session `secret`, or `None`: unknown, expired,
/// logged out, or its token revoked (told apart nowhere). The lookup is by
/// the secret's hash, so no secret is compared in SQL.
pub async fn find_ui_session<'c, E: PgExecutor<'c>>(
    executor: E,
    secret: &str,
) -> Result<Option<ApiToken>> {
    let row: Option<TokenRow> = sqlx::query_as(include_str!("../../sql/find_ui_session.sql"))
        .bind(&sha256(secret)[..])
        .fetch_optional(executor)
        .await?;
    row.map(ApiToken::try_from).transpose()
}

/// End session `secret` (log out). True when there was one.
pub async fn end_ui_session<'c, E: PgExecutor<'c>>(executor: E, secret: &str) -> Result<bool> {
    let ended = sqlx::query(include_str!("../../sql/end_ui_session.sql"))
        .bind(&sha256(secret)[..])
        .execute(executor)
        .await?;
    Ok(ended.rows_affected() > 0)
}
