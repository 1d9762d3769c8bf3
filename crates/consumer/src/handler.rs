//! Handlers, the context they run with, and how they report failure.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use jobwire_core::{Backoff, ClaimedJob, LeaseGeneration};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Runs one job type. Handlers must be idempotent: a job may run more than
/// once (a worker that crashed after the work but before reporting it).
///
/// Any `Fn(JobContext) -> impl Future<Output = Result<(), JobError>>` closure
/// is a handler.
#[async_trait]
pub trait JobHandler: Send + Sync + 'static {
    /// Run one attempt. Return `Ok(())` on success, a [`JobError`] otherwise.
    /// Watch [`JobContext::cancelled`] in long work: it fires when the job is
    /// cancelled, its lease is lost, its deadline passes or the worker stops.
    async fn run(&self, ctx: JobContext) -> Result<(), JobError>;
}

#[async_trait]
impl<F, Fut> JobHandler for F
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    async fn run(&self, ctx: JobContext) -> Result<(), JobError> {
        (self)(ctx).await
    }
}

/// Whether a failed attempt should be tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobErrorKind {
    /// Try again after backoff, until the attempts run out.
    Retryable,
    /// Do not try again: the job goes to FAILED (the dead letter) now.
    Fatal,
    /// The handler stopped because its context was cancelled.
    Cancelled,
}

/// A failed attempt, as the handler reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobError {
    /// Retry or not.
    pub kind: JobErrorKind,
    /// Stable, machine-readable code (stored as `last_error_code`).
    pub code: String,
    /// Human-readable detail (stored as `last_error`).
    pub message: String,
    /// Overrides the handler's backoff for this retry.
    pub retry_after: Option<Duration>,
}

impl JobError {
    /// A failure worth retrying (a timeout, a 503, a lock conflict).
    pub fn retryable(code: impl Into<String>, message: impl fmt::Display) -> Self {
        JobError {
            kind: JobErrorKind::Retryable,
            code: code.into(),
            message: message.to_string(),
            retry_after: None,
        }
    }

    /// A failure that retrying cannot fix (bad input, a 404, a rejected card).
    pub fn fatal(code: impl Into<String>, message: impl fmt::Display) -> Self {
        JobError {
            kind: JobErrorKind::Fatal,
            code: code.into(),
            message: message.to_string(),
            retry_after: None,
        }
    }

    /// The handler saw [`JobContext::cancelled`] and stopped.
    pub fn cancelled() -> Self {
        JobError {
            kind: JobErrorKind::Cancelled,
            code: "CANCELLED".into(),
            message: "stopped on cancellation".into(),
            retry_after: None,
        }
    }

    /// Retry after exactly `delay` instead of the handler's backoff.
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for JobError {}

/// Why a job's context was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// An operator asked to cancel the job (CANCEL_REQUESTED).
    Requested,
    /// The worker lost the lease (swept, reclaimed) or could not renew it in
    /// time: stop, the work may no longer count. What the handler returns is
    /// still reported, fenced: the table refuses it if the lease did move on.
    LeaseLost,
    /// The handler's timeout passed.
    Timeout,
    /// The worker is shutting down and the drain deadline passed.
    Shutdown,
}

/// Everything a handler gets for one attempt.
#[derive(Clone)]
pub struct JobContext {
    pub(crate) job: Arc<ClaimedJob>,
    pub(crate) cancel: CancellationToken,
    pub(crate) reason: Arc<OnceLock<CancelReason>>,
    pub(crate) deadline: Instant,
    pub(crate) worker_id: Arc<str>,
    pub(crate) pool: sqlx::PgPool,
    /// Set once the handler committed the job's completion itself.
    pub(crate) completed: Arc<AtomicBool>,
}

impl JobContext {
    /// The job's id: also the natural idempotency key for outside systems.
    pub fn job_id(&self) -> Uuid {
        self.job.lease.job_id
    }

    /// The fencing token this attempt holds.
    pub fn generation(&self) -> LeaseGeneration {
        self.job.lease.generation
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> i32 {
        self.job.attempt
    }

    /// The job's attempt budget.
    pub fn max_attempts(&self) -> i32 {
        self.job.max_attempts
    }

    /// The job type.
    pub fn job_type(&self) -> &str {
        &self.job.job_type
    }

    /// The queue it was claimed from.
    pub fn queue(&self) -> &str {
        &self.job.queue
    }

    /// The raw payload.
    pub fn payload(&self) -> &Value {
        &self.job.payload
    }

    /// The payload decoded as `T`; a payload that does not fit is a fatal
    /// `MALFORMED_PAYLOAD` error (retrying cannot fix it).
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T, JobError> {
        serde_json::from_value(self.job.payload.clone())
            .map_err(|err| JobError::fatal("MALFORMED_PAYLOAD", err))
    }

    /// The lease owner id of the worker running it.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// When the worker will cancel this attempt for running too long.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Resolves when the attempt should stop; see [`CancelReason`].
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// Whether the attempt should stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Why the attempt was cancelled, once it was.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.reason.get().copied()
    }

    /// The token itself, to hand to libraries that take one.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// The database pool, for handlers that write in the jobs database
    /// (effects, business rows).
    pub fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }

    /// Mark the job SUCCEEDED inside `tx` (fenced by this attempt's lease)
    /// and commit: the handler's own writes, its effect records and the
    /// completion become durable together, or not at all. A lost lease rolls
    /// everything back and is reported as a fatal `FENCED` error (the worker
    /// then reports nothing for this attempt). Return `Ok(())` afterwards;
    /// the worker does not complete the job a second time.
    pub async fn commit_with_completion(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    ) -> Result<(), JobError> {
        match jobwire_core::complete(&mut *tx, &self.worker_id, self.job.lease).await {
            Ok(_) => {}
            Err(err @ jobwire_core::Error::Fenced { .. }) => {
                let _ = tx.rollback().await;
                return Err(JobError::fatal("FENCED", err));
            }
            Err(err) => return Err(JobError::retryable("DATABASE", err)),
        }
        tx.commit()
            .await
            .map_err(|err| JobError::retryable("DATABASE", err))?;
        self.completed.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// Per-job-type settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HandlerOptions {
    /// Delay before each retry.
    pub backoff: Backoff,
    /// How long one attempt may run before it is cancelled and retried
    /// (error code `TIMEOUT`).
    pub timeout: Duration,
}

impl Default for HandlerOptions {
    fn default() -> Self {
        HandlerOptions {
            backoff: Backoff::default(),
            timeout: Duration::from_secs(10 * 60),
        }
    }
}

#[derive(Clone)]
pub(crate) struct RegisteredHandler {
    pub(crate) handler: Arc<dyn JobHandler>,
    pub(crate) options: HandlerOptions,
}

/// Job type -> handler. Build it once, share it (it is cloned cheaply into
/// every worker).
#[derive(Clone, Default)]
pub struct HandlerRegistry {
    handlers: HashMap<String, RegisteredHandler>,
}

impl HandlerRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `handler` for `job_type` with default options, replacing any
    /// earlier registration.
    pub fn register(&mut self, job_type: impl Into<String>, handler: impl JobHandler) -> &mut Self {
        self.register_with(job_type, handler, HandlerOptions::default())
    }

    /// Register `handler` for `job_type` with `options`.
    pub fn register_with(
        &mut self,
        job_type: impl Into<String>,
        handler: impl JobHandler,
        options: HandlerOptions,
    ) -> &mut Self {
        self.handlers.insert(
            job_type.into(),
            RegisteredHandler {
                handler: Arc::new(handler),
                options,
            },
        );
        self
    }

    /// The registered job types, sorted.
    pub fn job_types(&self) -> Vec<&str> {
        let mut types: Vec<&str> = self.handlers.keys().map(String::as_str).collect();
        types.sort_unstable();
        types
    }

    pub(crate) fn get(&self, job_type: &str) -> Option<&RegisteredHandler> {
        self.handlers.get(job_type)
    }
}

impl fmt::Debug for HandlerRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerRegistry")
            .field("job_types", &self.job_types())
            .finish()
    }
}
