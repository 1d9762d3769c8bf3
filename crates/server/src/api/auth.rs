//! Bearer tokens: who is calling, and may they. Each handler names the
//! scope it needs by taking [`Reader`], [`Writer`] or [`Admin`] as its first
//! argument, so the token is checked before the body is even read.
//!
//! A token bound to a tenant passes only [`TenantReader`] and
//! [`TenantWriter`], which the calls on single jobs take (enqueue, read,
//! cancel); their handlers then keep it to its tenant's jobs. Every other
//! call refuses it, so a customer's token never sees another customer's
//! queues, dead letters or listings.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use jobwire_core::{ApiToken, Scope};

use super::ApiState;
use super::error::ApiError;

/// The caller's token, once checked: its name is the actor recorded in
/// `job_audit` for what the call does.
async fn authorize(
    parts: &Parts,
    state: &ApiState,
    needed: Scope,
    tenant_calls: bool,
    through_outage: bool,
) -> Result<ApiToken, ApiError> {
    // Exactly one Authorization header: with two, which one a proxy or
    // this server reads first is nobody's promise.
    let mut headers = parts.headers.get_all(AUTHORIZATION).iter();
    let presented = headers
        .next()
        .filter(|_| headers.next().is_none())
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .ok_or(ApiError::Unauthenticated)?;
    let checked = if through_outage {
        state
            .tokens
            .authenticate_through_outage(&state.pool, presented)
            .await
    } else {
        state.tokens.authenticate(&state.pool, presented).await
    };
    let token = checked?.ok_or(ApiError::Unauthenticated)?;
    if !token.scope.allows(needed) {
        return Err(ApiError::Forbidden {
            message: format!(
                "Token {:?} has scope {}; this call needs {needed}.",
                token.name, token.scope
            ),
        });
    }
    if let Some(tenant) = &token.tenant
        && !tenant_calls
    {
        return Err(ApiError::Forbidden {
            message: format!(
                "Token {:?} is bound to tenant {tenant:?}: it may only enqueue, read and cancel that tenant's jobs (POST /jobs, GET /jobs/{{jobId}}, POST /jobs/{{jobId}}/cancel).",
                token.name
            ),
        });
    }
    Ok(token)
}

/// Whether `token` may see a job of `tenant`: any token not bound to a
/// tenant, or one bound to that same tenant.
pub(crate) fn sees_tenant(token: &ApiToken, tenant: Option<&str>) -> bool {
    token
        .tenant
        .as_deref()
        .is_none_or(|bound| Some(bound) == tenant)
}

macro_rules! scope_extractor {
    ($(#[$doc:meta])* $name:ident, $scope:expr, $tenant_calls:expr) => {
        scope_extractor!($(#[$doc])* $name, $scope, $tenant_calls, false);
    };
    ($(#[$doc:meta])* $name:ident, $scope:expr, $tenant_calls:expr, $through_outage:expr) => {
        $(#[$doc])*
        pub(crate) struct $name(pub ApiToken);

        impl FromRequestParts<ApiState> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(
                parts: &mut Parts,
                state: &ApiState,
            ) -> Result<Self, Self::Rejection> {
                authorize(parts, state, $scope, $tenant_calls, $through_outage)
                    .await
                    .map($name)
            }
        }
    };
}

scope_extractor!(
    /// A caller with at least a `read` token.
    Reader,
    Scope::Read,
    false
);
scope_extractor!(
    /// A caller with at least a `read` token, for `/metrics`: a token the
    /// database confirmed shortly before still passes while the database
    /// cannot be reached (`TokenCache::authenticate_through_outage`).
    #[allow(dead_code, reason = "the scrape needs the check, not the token")]
    MetricsReader,
    Scope::Read,
    false,
    true
);
scope_extractor!(
    /// A caller with at least a `write` token.
    Writer,
    Scope::Write,
    false
);
scope_extractor!(
    /// A caller with an `admin` token.
    Admin,
    Scope::Admin,
    false
);
scope_extractor!(
    /// A caller with at least a `read` token, perhaps bound to a tenant
    /// (the handler keeps it to that tenant's jobs).
    TenantReader,
    Scope::Read,
    true
);
scope_extractor!(
    /// A caller with at least a `write` token, perhaps bound to a tenant
    /// (the handler keeps it to that tenant's jobs).
    TenantWriter,
    Scope::Write,
    true
);
