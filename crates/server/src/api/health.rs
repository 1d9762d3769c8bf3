//! `/healthz` (the process answers) and `/readyz` (and can reach a migrated
//! database). Both are open: load balancers and orchestrators have no token.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use jobwire_core::SchemaState;
use serde::Serialize;
use utoipa::ToSchema;

use super::ApiState;
use super::error::{ApiError, ErrorEnvelope};

/// How long readiness waits for the database before saying no.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// A health answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    #[schema(example = "ok")]
    status: &'static str,
}

/// Liveness: the process is up and serving. No token, no database.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "OK", body = Health)))]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: the database answers and has this version's schema.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "OK", body = Health),
        (status = 503, description = "DATABASE_UNAVAILABLE or SCHEMA_NOT_READY", body = ErrorEnvelope),
    )
)]
pub(crate) async fn readyz(State(state): State<ApiState>) -> Result<Json<Health>, ApiError> {
    let unavailable = || ApiError::Unavailable {
        code: "DATABASE_UNAVAILABLE",
        message: "The database cannot be reached.".into(),
    };
    let schema = tokio::time::timeout(READY_TIMEOUT, jobwire_core::schema_state(&state.pool))
        .await
        .map_err(|_| unavailable())?;
    match schema {
        Ok(SchemaState::Current) => Ok(Json(Health { status: "ready" })),
        Ok(_) => Err(ApiError::Unavailable {
            code: "SCHEMA_NOT_READY",
            message: "The database's jobwire schema is missing or old: run `jobwire migrate`."
                .into(),
        }),
        // Not ready, whatever the reason (a permission denied included):
        // readiness answers 200 or 503, never 500.
        Err(jobwire_core::Error::Database(err)) => match super::error::database_error(&err) {
            unready @ ApiError::Unavailable { .. } => Err(unready),
            _ => Err(unavailable()),
        },
        Err(_) => Err(unavailable()),
    }
}
