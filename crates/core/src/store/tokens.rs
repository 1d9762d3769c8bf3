//! API tokens: created with a secret shown once, stored as a SHA-256 of
//! that secret, checked in constant time.
//!
//! A token reads `jw_<token id>_<secret>`: 16 hex digits that find the row,
//! then 64 hex digits (32 random bytes) that prove possession. The secret
//! is random, not chosen by a person, so a plain SHA-256 is enough to keep
//! a copy of the table from being a copy of the tokens (a slow password
//! hash protects guessable secrets, which these are not).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::PgExecutor;
use subtle::ConstantTimeEq;

use crate::{Error, Result};

/// What a token may do. Each scope includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Look: jobs, queues, dead letters, metrics.
    Read,
    /// Also enqueue and cancel jobs.
    Write,
    /// Also act on many jobs or a whole queue: dead-letter retry, pause, resume.
    Admin,
}

impl Scope {
    /// The spelling stored in `job_api_tokens.scope` and used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }

    /// Whether a token of this scope may make a call that needs `required`.
    pub fn allows(self, required: Scope) -> bool {
        self >= required
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "read" => Ok(Scope::Read),
            "write" => Ok(Scope::Write),
            "admin" => Ok(Scope::Admin),
            other => Err(Error::InvalidArgument {
                argument: "scope",
                reason: format!("{other:?} is not one of read, write, admin"),
            }),
        }
    }
}

/// A token as stored: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiToken {
    /// The public half of the token.
    pub token_id: String,
    /// Who it is: the actor recorded in `job_audit` for what it does.
    pub name: String,
    /// What it may do.
    pub scope: Scope,
    /// The tenant it is bound to, if any: it then enqueues and reads only
    /// that tenant's jobs.
    pub tenant: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(sqlx::FromRow)]
pub(super) struct TokenRow {
    token_id: String,
    name: String,
    scope: String,
    tenant: Option<String>,
    created_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
}

impl TryFrom<TokenRow> for ApiToken {
    type Error = Error;

    fn try_from(row: TokenRow) -> Result<Self> {
        let scope = row
            .scope
            .parse()
            .map_err(|_| Error::Decode(format!("unknown token scope {:?}", row.scope)))?;
        Ok(ApiToken {
            token_id: row.token_id,
            name: row.name,
            scope,
            tenant: row.tenant,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
        })
    }
}

/// A token just created, with the secret that is shown this once.
#[derive(Clone)]
pub struct CreatedToken {
    /// What is stored.
    pub token: ApiToken,
    /// The whole bearer token (`jw_<id>_<secret>`). Not stored anywhere.
    pub secret: String,
}

// By hand, so that logging a created token never prints its secret.
impl fmt::Debug for CreatedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreatedToken")
            .field("token", &self.token)
            .field("secret", &"<redacted>")
            .finish()
    }
}

const TOKEN_PREFIX: &str = "jw_";

pub(super) fn sha256(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The channel a change to a token (revoked, deleted) is announced on, its
/// id as the payload (empty after a `TRUNCATE`): a process that keeps
/// [`StoredApiToken`]s forgets the one named (or all of them) when it hears
/// of it (migration `20261203000003`).
pub const API_TOKEN_CHANNEL: &str = "jobwire_api_tokens";

/// Split a presented token into its id and secret, if it has the shape
/// (`jw_`, 16 hex digits, `_`, 64 hex digits). `None` for anything else.
pub fn parse_api_token(presented: &str) -> Option<(&str, &str)> {
    let rest = presented.strip_prefix(TOKEN_PREFIX)?;
    let (token_id, secret) = rest.split_once('_')?;
    let is_hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    (is_hex(token_id, 16) && is_hex(secret, 64)).then_some((token_id, secret))
}

/// Create a token called `name` with `scope`. The returned secret is the
/// only copy; the database keeps its SHA-256. A name may belong to one live
/// token at a time ([`Error::InvalidArgument`] otherwise).
pub async fn create_api_token<'c, E: PgExecutor<'c>>(
    executor: E,
    name: &str,
    scope: Scope,
) -> Result<CreatedToken> {
    create_tenant_api_token(executor, name, scope, None).await
}

/// [`create_api_token`], bound to `tenant` when given: such a token
/// enqueues only that tenant's jobs and reads only them. A read or write
/// scope only ([`Error::InvalidArgument`] for admin).
pub async fn create_tenant_api_token<'c, E: PgExecutor<'c>>(
    executor: E,
    name: &str,
    scope: Scope,
    tenant: Option<&str>,
) -> Result<CreatedToken> {
    if let Some(tenant) = tenant {
        super::tenants::validate_tenant(tenant)?;
        if scope == Scope::Admin {
            return Err(Error::InvalidArgument {
                argument: "scope",
                reason: "a token bound to a tenant is read or write, never admin".into(),
            });
        }
    }
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'));
    if !valid_name {
        return Err(Error::InvalidArgument {
            argument: "name",
            reason: "1 to 64 letters, digits and . _ @ -, starting with a letter or digit".into(),
        });
    }
    let mut id_bytes = [0u8; 8];
    let mut secret_bytes = [0u8; 32];
    let mut rng = rand::rng();
    rng.fill_bytes(&mut id_bytes);
    rng.fill_bytes(&mut secret_bytes);
    let token_id = hex::encode(id_bytes);
    let secret = hex::encode(secret_bytes);
    let row: TokenRow = sqlx::query_as(include_str!("../../sql/create_api_token.sql"))
        .bind(&token_id)
        .bind(name)
        .bind(scope.as_str())
        .bind(&sha256(&secret)[..])
        .bind(tenant)
        .fetch_one(executor)
        .await
        .map_err(|err| match &err {
            sqlx::Error::Database(db) if db.is_unique_violation() => Error::InvalidArgument {
                argument: "name",
                reason: format!("a live token is already called {name:?}; revoke it first"),
            },
            _ => Error::from(err),
        })?;
    Ok(CreatedToken {
        token: row.try_into()?,
        secret: format!("{TOKEN_PREFIX}{token_id}_{secret}"),
    })
}

/// A live token as stored, with the hash its secret must match: what a
/// process may keep to check presented tokens without asking the database
/// each time. Nothing in it changes while the token lives; revoking or
/// deleting the token is announced on [`API_TOKEN_CHANNEL`].
#[derive(Clone)]
pub struct StoredApiToken {
    token: ApiToken,
    secret_sha256: Vec<u8>,
}

impl StoredApiToken {
    /// `token` as stored with `secret` as its secret (for tests of code
    /// that keeps tokens; the database is where real ones come from).
    pub fn new(token: ApiToken, secret: &str) -> Self {
        StoredApiToken {
            token,
            secret_sha256: sha256(secret).to_vec(),
        }
    }

    /// The token.
    pub fn token(&self) -> &ApiToken {
        &self.token
    }

    /// Whether `secret` is this token's, compared in constant time.
    pub fn admits(&self, secret: &str) -> bool {
        sha256(secret).ct_eq(&self.secret_sha256[..]).into()
    }
}

// By hand, so that logging a stored token never prints its secret's hash.
impl fmt::Debug for StoredApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredApiToken")
            .field("token", &self.token)
            .field("secret_sha256", &"<redacted>")
            .finish()
    }
}

/// The live token whose public id is `token_id`, if there is one.
pub async fn find_live_api_token<'c, E: PgExecutor<'c>>(
    executor: E,
    token_id: &str,
) -> Result<Option<StoredApiToken>> {
    #[derive(sqlx::FromRow)]
    struct Found {
        #[sqlx(flatten)]
        token: TokenRow,
        secret_sha256: Vec<u8>,
    }
    let found: Option<Found> = sqlx::query_as(include_str!("../../sql/find_api_token.sql"))
        .bind(token_id)
        .fetch_optional(executor)
        .await?;
    found
        .map(|found| {
            Ok(StoredApiToken {
                token: found.token.try_into()?,
                secret_sha256: found.secret_sha256,
            })
        })
        .transpose()
}

/// The live token `presented` is, or `None` for anything else: malformed,
/// unknown, revoked, or a wrong secret (told apart nowhere, so a caller
/// learns nothing from the answer). The secret's hash is compared in
/// constant time.
pub async fn authenticate_api_token<'c, E: PgExecutor<'c>>(
    executor: E,
    presented: &str,
) -> Result<Option<ApiToken>> {
    let Some((token_id, secret)) = parse_api_token(presented) else {
        return Ok(None);
    };
    let stored = find_live_api_token(executor, token_id).await?;
    Ok(stored
        .filter(|stored| stored.admits(secret))
        .map(|stored| stored.token))
}

/// Every token, live ones first (never a secret or its hash).
pub async fn list_api_tokens<'c, E: PgExecutor<'c>>(executor: E) -> Result<Vec<ApiToken>> {
    let rows: Vec<TokenRow> = sqlx::query_as(include_str!("../../sql/list_api_tokens.sql"))
        .fetch_all(executor)
        .await?;
    rows.into_iter().map(ApiToken::try_from).collect()
}

/// Revoke the live token called `name`: it stops working at once for
/// every check that asks the database, and for the API servers' token
/// caches as soon as they hear of it on [`API_TOKEN_CHANNEL`]
/// (milliseconds). Returns false when no live token has that name.
pub async fn revoke_api_token<'c, E: PgExecutor<'c>>(executor: E, name: &str) -> Result<bool> {
    let revoked: Option<String> =
        sqlx::query_scalar(include_str!("../../sql/revoke_api_token.sql"))
            .bind(name)
            .fetch_optional(executor)
            .await?;
    Ok(revoked.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_tokens_parse() {
        let id = "0123456789abcdef";
        let secret = "ab".repeat(32);
        assert_eq!(
            parse_api_token(&format!("jw_{id}_{secret}")),
            Some((id, secret.as_str()))
        );
        for bad in [
            String::new(),
            format!("jx_{id}_{secret}"),
            format!("jw_{id}{secret}"),
            format!("jw_{}_{secret}", &id[1..]),
            format!("jw_{id}_{}", &secret[1..]),
            format!("jw_{id}_{}", secret.to_uppercase()),
            format!("jw_{id}_{secret}_"),
        ] {
            assert_eq!(parse_api_token(&bad), None, "{bad}");
        }
    }

    #[test]
    fn scopes_include_the_ones_below() {
        assert!(Scope::Admin.allows(Scope::Read));
        assert!(Scope::Write.allows(Scope::Write));
        assert!(!Scope::Read.allows(Scope::Write));
        assert!(!Scope::Write.allows(Scope::Admin));
        assert!("owner".parse::<Scope>().is_err());
    }
}
