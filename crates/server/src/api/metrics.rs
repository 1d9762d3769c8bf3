//! `/metrics`: the process's metrics in the Prometheus text format, for a
//! `read` token (Prometheus sends it as `authorization.credentials` in its
//! scrape config). A token the database confirmed within the last five
//! minutes still passes while the database cannot be reached, so a scrape
//! shows the outage instead of failing with it.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

use super::ApiState;
use super::auth::MetricsReader;
use super::error::{ApiError, ErrorEnvelope, Unavailable};
use super::extract::{NoQuery, QueryParams};

/// The text exposition format's content type.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric of this process — and, in the one process elected to collect
/// them, the database's gauges — in the Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "meta",
    responses(
        (status = 200, description = "Prometheus text exposition (docs/operations.md lists every metric)", content_type = "text/plain", body = String),
        (status = 400, description = "INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "UNAUTHENTICATED", body = ErrorEnvelope),
        (status = 403, description = "A token bound to a tenant (FORBIDDEN)", body = ErrorEnvelope),
        (status = 404, description = "METRICS_DISABLED: the application installed a metrics recorder of its own", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["read"]))
)]
pub(crate) async fn metrics(
    _reader: MetricsReader,
    State(state): State<ApiState>,
    _: QueryParams<NoQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let metrics = state.metrics.as_ref().ok_or_else(|| ApiError::NotFound {
        code: "METRICS_DISABLED",
        message: "This process records jobwire's metrics into the application's own recorder."
            .into(),
    })?;
    Ok(([(CONTENT_TYPE, EXPOSITION)], metrics.render()))
}
