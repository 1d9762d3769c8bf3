//! The HTTP API: routes, their OpenAPI description (generated from the
//! handlers, so the spec cannot miss a route), and the layers every request
//! goes through (request id, body limit, the error envelope).

use axum::Json;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use sqlx::PgPool;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{OpenApi as OpenApiDocument, Server};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

mod auth;
pub(crate) mod dead_letter;
mod enqueue_batch;
pub(crate) mod error;
pub(crate) mod extract;
mod health;
pub(crate) mod jobs;
mod limits;
mod metrics;
mod queues;
pub(crate) mod refusals;
pub(crate) mod request_id;
mod schedules;
mod tenants;
mod token_cache;

use error::ApiError;
use extract::{NoQuery, QueryParams};

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct ApiState {
    pub(crate) pool: PgPool,
    /// The tokens this server has checked (see [`token_cache`]).
    pub(crate) tokens: token_cache::TokenCache,
    /// Writes the jobs of concurrent `POST /jobs` requests together.
    pub(crate) enqueues: enqueue_batch::EnqueueBatches,
    /// The recorder `/metrics` renders; `None` when the application
    /// installed its own.
    pub(crate) metrics: Option<crate::metrics::Metrics>,
}

/// The largest request body accepted: the payload ceiling plus room for
/// the other fields. Payloads between the configured limit
/// (`job_settings.max_payload_bytes`) and this are refused by the database
/// with the same 413.
pub(crate) const BODY_LIMIT_BYTES: usize = jobwire_core::PAYLOAD_CEILING_BYTES + 64 * 1024;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "jobwire",
        description = "Background jobs with PostgreSQL as the source of truth. \
                       Every call but /healthz and /readyz needs a bearer token \
                       (`jobwire token create NAME --scope read|write|admin`). \
                       Errors share one envelope: {\"error\":{\"code\",\"message\",\"requestId\"}}. \
                       Every route but /healthz and /readyz refuses a query parameter it does not \
                       take (400 INVALID_QUERY), and may answer 503 since it reads the database, \
                       its token's check included (DATABASE_UNAVAILABLE, DATABASE_BUSY: try again; \
                       SCHEMA_NOT_READY: run `jobwire migrate`); 500 INTERNAL is a bug. Every route \
                       that takes a body answers 400 for one it cannot use: MALFORMED_JSON, \
                       UNREADABLE_BODY (cut short), INVALID_FIELD on `body` (not a JSON object, or \
                       a number the API cannot keep exactly), or INVALID_FIELD naming an unknown \
                       or mistyped field. Rules across fields \
                       (runAt with delayMs, since after until, shed.depth below maxQueued, ...) \
                       are in the descriptions of the fields and operations.",
        license(name = "MIT OR Apache-2.0")
    ),
    servers((url = "http://127.0.0.1:8080", description = "jobwire serve's default address")),
    modifiers(&BearerAuth),
    tags(
        (name = "jobs", description = "Enqueue, read, list and cancel jobs"),
        (name = "dead letters", description = "FAILED jobs by type and error, and retrying them"),
        (name = "queues", description = "Queues: depth, age, pause and resume"),
        (name = "tenants", description = "Per-queue limits: tenants' running and waiting jobs and enqueue rates, the queue's depth and shedding"),
        (name = "schedules", description = "Recurring schedules: cron in a time zone, jitter, missed runs"),
        (name = "health", description = "Liveness and readiness (no token)"),
        (name = "meta", description = "This description and the Prometheus metrics"),
    )
)]
struct ApiDoc;

/// Declares the `bearer` scheme the handlers' `security(...)` refer to.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut OpenApiDocument) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The router and the OpenAPI document describing it, built together from
/// the same handler list.
fn routes() -> (axum::Router<ApiState>, OpenApiDocument) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(jobs::enqueue_job, jobs::list_jobs))
        .routes(routes!(jobs::get_job))
        .routes(routes!(jobs::cancel_job))
        .routes(routes!(jobs::replay_job))
        .routes(routes!(dead_letter::dead_letter_groups))
        .routes(routes!(dead_letter::retry_dead_letters))
        .routes(routes!(queues::list_queues))
        .routes(routes!(queues::pause_queue))
        .routes(routes!(queues::resume_queue))
        .routes(routes!(tenants::list_tenants))
        .routes(routes!(
            tenants::put_default_cap,
            tenants::delete_default_cap
        ))
        .routes(routes!(tenants::put_tenant_cap, tenants::delete_tenant_cap))
        .routes(routes!(
            limits::get_queue_limits,
            limits::put_queue_limits,
            limits::delete_queue_limits
        ))
        .routes(routes!(
            limits::put_tenant_defaults,
            limits::delete_tenant_defaults
        ))
        .routes(routes!(schedules::list_schedules))
        .routes(routes!(
            schedules::put_schedule,
            schedules::get_schedule,
            schedules::delete_schedule
        ))
        .routes(routes!(schedules::pause_schedule))
        .routes(routes!(schedules::resume_schedule))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(openapi_json))
        .routes(routes!(metrics::metrics))
        .split_for_parts()
}

/// The API's OpenAPI 3.1 document, as served at `/openapi.json` (and
/// checked in as `docs/api/openapi.json`).
pub fn openapi() -> OpenApiDocument {
    let (_, mut document) = routes();
    // The document does not depend on where it is served from.
    document.servers = Some(vec![Server::new("http://127.0.0.1:8080")]);
    document
}

/// This API's OpenAPI document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json"),
        (status = 400, description = "INVALID_QUERY: any query parameter", body = error::ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = error::ErrorEnvelope),
        (status = 403, description = "A token bound to a tenant (FORBIDDEN)", body = error::ErrorEnvelope),
        error::Unavailable,
    ),
    security(("bearer" = ["read"]))
)]
async fn openapi_json(_reader: auth::Reader, _: QueryParams<NoQuery>) -> Json<OpenApiDocument> {
    Json(openapi())
}

/// The whole API as an axum router over `pool`, with the operator
/// dashboard under `/ui`. Serving it exports this process's metrics at
/// `/metrics` (installing the Prometheus recorder).
pub fn router(pool: PgPool) -> axum::Router {
    let (router, _) = routes();
    with_common_layers(router.merge(crate::ui::routes()), pool)
}

/// Only `/metrics` and the health checks: for worker and relay processes
/// that serve no API (`--metrics-listen`). Same tokens.
pub fn metrics_router(pool: PgPool) -> axum::Router {
    let router = axum::Router::new()
        .route("/metrics", axum::routing::get(metrics::metrics))
        .route("/healthz", axum::routing::get(health::healthz))
        .route("/readyz", axum::routing::get(health::readyz));
    with_common_layers(router, pool)
}

fn with_common_layers(router: axum::Router<ApiState>, pool: PgPool) -> axum::Router {
    let metrics = match crate::metrics::Metrics::install() {
        Ok(metrics) => Some(metrics),
        Err(err) => {
            tracing::warn!(error = %err, "/metrics is off");
            None
        }
    };
    // Both answers take a token first, as every route but the health
    // checks does: without one, a caller learns nothing of which routes
    // and methods exist (the OpenAPI document is behind a token too).
    let routed = router
        .fallback(|_caller: auth::Reader| async {
            ApiError::NotFound {
                code: "ROUTE_NOT_FOUND",
                message: "No such route; see /openapi.json.".into(),
            }
        })
        .method_not_allowed_fallback(|_caller: auth::Reader| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        .layer(middleware::from_fn(request_id::with_request_id))
        .with_state(ApiState {
            tokens: token_cache::TokenCache::listening(pool.clone()),
            enqueues: enqueue_batch::EnqueueBatches::start(pool.clone()),
            pool,
            metrics,
        });
    // axum adds `Allow` to whatever the method fallback answers, a 401 or
    // the dashboard's way to its login too, from inside the route: that
    // header would still name a route's methods to a caller without a
    // token. Only a router around the whole one can take it off again.
    axum::Router::new()
        .fallback_service(routed)
        .layer(middleware::map_response(allow_only_on_405))
}

/// Drop `Allow` from every answer but a 405 (given only to a caller who
/// passed the token check or the dashboard's login).
async fn allow_only_on_405(mut response: axum::response::Response) -> axum::response::Response {
    if response.status() != axum::http::StatusCode::METHOD_NOT_ALLOWED {
        response.headers_mut().remove(axum::http::header::ALLOW);
    }
    response
}
