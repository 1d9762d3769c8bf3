//! Bearer tokens: who is calling, and may they. Each handler names the
//! scope it needs by taking [`Reader`], [`Writer`] or [`Admin`] as its first
//! argument, so the token is checked before the body is even read.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use jobwire_core::{ApiToken, Scope};

use super::ApiState;
use super::error::ApiError;

/// The caller's token, once checked: its name is the actor recorded in
/// `job_audit` for what the call does.
async fn authorize(parts: &Parts, state: &ApiState, needed: Scope) -> Result<ApiToken, ApiError> {
    let presented = parts
        .headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .ok_or(ApiError::Unauthenticated)?;
    let token = jobwire_core::authenticate_api_token(&state.pool, presented)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
    if !token.scope.allows(needed) {
        return Err(ApiError::Forbidden {
            message: format!(
                "Token {:?} has scope {}; this call needs {needed}.",
                token.name, token.scope
            ),
        });
    }
    Ok(token)
}

macro_rules! scope_extractor {
    ($(#[$doc:meta])* $name:ident, $scope:expr) => {
        $(#[$doc])*
        pub(crate) struct $name(pub ApiToken);

        impl FromRequestParts<ApiState> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(
                parts: &mut Parts,
                state: &ApiState,
            ) -> Result<Self, Self::Rejection> {
                authorize(parts, state, $scope).await.map($name)
            }
        }
    };
}

scope_extractor!(
    /// A caller with at least a `read` token.
    Reader,
    Scope::Read
);
scope_extractor!(
    /// A caller with at least a `write` token.
    Writer,
    Scope::Write
);
scope_extractor!(
    /// A caller with an `admin` token.
    Admin,
    Scope::Admin
);
