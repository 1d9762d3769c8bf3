//! The public types of the job model.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// The lifecycle state of a job. The spellings are the schema contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Waiting to be claimed.
    Queued,
    /// Claimed by a worker that holds its lease.
    Running,
    /// Waiting for its next attempt after a retryable failure or lost lease.
    RetryWait,
    /// Finished successfully.
    Succeeded,
    /// Finished unsuccessfully: the dead letter.
    Failed,
    /// Running, and asked to stop; the worker still holds the lease.
    CancelRequested,
    /// Finished by cancellation.
    Cancelled,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 7] = [
        JobState::Queued,
        JobState::Running,
        JobState::RetryWait,
        JobState::Succeeded,
        JobState::Failed,
        JobState::CancelRequested,
        JobState::Cancelled,
    ];

    /// The spelling stored in the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "QUEUED",
            JobState::Running => "RUNNING",
            JobState::RetryWait => "RETRY_WAIT",
            JobState::Succeeded => "SUCCEEDED",
            JobState::Failed => "FAILED",
            JobState::CancelRequested => "CANCEL_REQUESTED",
            JobState::Cancelled => "CANCELLED",
        }
    }

    /// SUCCEEDED, FAILED or CANCELLED: nothing will run this job again
    /// (short of an operator replay of a FAILED job).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    /// QUEUED or RETRY_WAIT: a claim may take it once it is due.
    pub fn is_claimable(self) -> bool {
        matches!(self, JobState::Queued | JobState::RetryWait)
    }

    /// RUNNING or CANCEL_REQUESTED: a worker holds its lease.
    pub fn is_held(self) -> bool {
        matches!(self, JobState::Running | JobState::CancelRequested)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A `state` value that is not one of the contract's spellings; it says
/// which spellings there are.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "unknown job state {0:?}: one of {states}",
    states = JobState::ALL.map(JobState::as_str).join(", ")
)]
pub struct ParseJobStateError(pub String);

impl FromStr for JobState {
    type Err = ParseJobStateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| ParseJobStateError(s.to_owned()))
    }
}

impl TryFrom<String> for JobState {
    type Error = ParseJobStateError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

// The one way a state is read from or written to the database: the `state`
// column is text (with a CHECK on the spellings), so a JobState travels as
// text and decodes through `FromStr`. A spelling the code does not know is a
// decode error (`Error::Decode`), never a transient one.
impl sqlx::Type<sqlx::Postgres> for JobState {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <&str as sqlx::Type<sqlx::Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Postgres> for JobState {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let text = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
        Ok(text.parse()?)
    }
}

impl sqlx::Encode<'_, sqlx::Postgres> for JobState {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.as_str(), buf)
    }
}

/// The fencing token: raised by every claim of a job.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, sqlx::Type,
)]
#[sqlx(transparent)]
#[serde(transparent)]
pub struct LeaseGeneration(pub i64);

impl fmt::Display for LeaseGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a worker holds after a claim: the job and the generation it claimed.
/// Together with the worker's lease owner id it fences every later write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lease {
    /// The job.
    pub job_id: Uuid,
    /// The generation this claim raised the job to.
    pub generation: LeaseGeneration,
}

/// A job to enqueue. Build with [`NewJob::new`] and the `with_*` methods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewJob {
    /// The handler that runs it.
    pub job_type: String,
    /// Input for the handler: small and versioned (ids, not objects).
    pub payload: Value,
    /// The queue it is routed to.
    pub queue: String,
    /// Lower runs first.
    pub priority: i16,
    /// Attempts before it is dead-lettered (>= 1).
    pub max_attempts: i32,
    /// Earliest time to run, absolute. Exclusive with `delay`.
    pub run_at: Option<DateTime<Utc>>,
    /// Earliest time to run, relative to the database clock at insert.
    pub delay: Option<TimeDelta>,
    /// Idempotency key: a second enqueue with the same (job_type, key) returns
    /// the first job with `duplicate = true` while that job is in the hot table.
    pub dedup_key: Option<String>,
    /// The span it was enqueued in. `None`: the enqueue records the current
    /// `tracing` span's, if it belongs to an OpenTelemetry trace.
    pub trace_context: Option<crate::TraceContext>,
    /// The customer (account, workspace) it works for; a queue can cap how
    /// many of one tenant's jobs run at once (docs/tenants.md).
    #[serde(default)]
    pub tenant: Option<String>,
}

impl NewJob {
    /// Default queue name.
    pub const DEFAULT_QUEUE: &'static str = "default";
    /// Default attempt budget.
    pub const DEFAULT_MAX_ATTEMPTS: i32 = 25;

    /// A job of `job_type` with `payload` on the default queue.
    pub fn new(job_type: impl Into<String>, payload: Value) -> Self {
        NewJob {
            job_type: job_type.into(),
            payload,
            queue: Self::DEFAULT_QUEUE.to_owned(),
            priority: 0,
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            run_at: None,
            delay: None,
            dedup_key: None,
            trace_context: None,
            tenant: None,
        }
    }

    /// Route to `queue`.
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// Set the priority (lower runs first).
    pub fn with_priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Set the attempt budget.
    pub fn with_max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Run no earlier than `at`.
    pub fn with_run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Run no earlier than `delay` after the database's `now()` at insert.
    pub fn with_delay(mut self, delay: TimeDelta) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Make the enqueue idempotent under `key`.
    pub fn with_dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }

    /// Work for `tenant` (counted against the queue's per-tenant cap).
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Record this trace context (e.g. an incoming request's `traceparent`)
    /// instead of the current span's.
    pub fn with_trace_context(mut self, context: crate::TraceContext) -> Self {
        self.trace_context = Some(context);
        self
    }
}

/// The answer to an enqueue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueuedJob {
    /// The job's id (the existing job's for a duplicate).
    pub job_id: Uuid,
    /// True when the dedup key was already held and nothing new was inserted.
    pub duplicate: bool,
    /// The job's state as this statement saw it.
    pub state: JobState,
    /// When it may first run.
    pub run_after: DateTime<Utc>,
    /// When the job was written: its transaction's time (a duplicate's, the existing job's).
    pub created_at: DateTime<Utc>,
}

/// A job a worker has claimed and now holds the lease on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimedJob {
    /// The fence: job id and the generation this claim raised it to.
    pub lease: Lease,
    /// Queue it was claimed from.
    pub queue: String,
    /// Its handler.
    pub job_type: String,
    /// Its priority.
    pub priority: i16,
    /// Handler input.
    pub payload: Value,
    /// Why the stored payload could not be read as JSON, if it could not:
    /// jsonb keeps numbers beyond a double's range and nesting deeper than
    /// 128, which only a writer other than this library can store (the SQL
    /// enqueue, a row written by hand). `payload` is then null, and the
    /// worker fails the job at once with `UNREADABLE_PAYLOAD`.
    pub unreadable_payload: Option<String>,
    /// This attempt's number, from 1 (incremented at claim).
    pub attempt: i32,
    /// Its attempt budget.
    pub max_attempts: i32,
    /// When the lease expires unless renewed (database clock).
    pub lease_expires_at: DateTime<Utc>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it became due.
    pub run_after: DateTime<Utc>,
    /// The span it was enqueued in, which each attempt's span links to.
    pub trace_context: Option<crate::TraceContext>,
}

impl ClaimedJob {
    /// The job id.
    pub fn job_id(&self) -> Uuid {
        self.lease.job_id
    }
}

/// Why a wake-up for a job claimed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ClaimMiss {
    /// No such job (never existed, or archived).
    Unknown,
    /// Another worker holds it (RUNNING or CANCEL_REQUESTED).
    Held,
    /// It already finished.
    Finished {
        /// Its terminal state.
        state: JobState,
    },
    /// Not due yet (a wake-up that arrived early).
    NotDue {
        /// When it becomes due.
        run_after: DateTime<Utc>,
    },
    /// A concurrent claimer was taking it at this very moment.
    Contended,
    /// Its queue is paused: no claims until it resumes (which wakes it again).
    Paused,
    /// It belongs to a queue this worker does not serve from that topic: a
    /// mis-routed wake-up must not bypass that queue's own workers, slots
    /// and pause.
    OtherQueue {
        /// The job's queue.
        queue: String,
    },
    /// Its tenant already runs as many jobs as its cap allows on this
    /// queue. It waits: when one of them finishes, its slot is handed to the
    /// tenant's next job, with a wake-up of its own.
    Capped,
}

impl ClaimMiss {
    /// A short label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            ClaimMiss::Unknown => "unknown",
            ClaimMiss::Held => "held",
            ClaimMiss::Finished { .. } => "finished",
            ClaimMiss::NotDue { .. } => "not_due",
            ClaimMiss::Contended => "contended",
            ClaimMiss::Paused => "paused",
            ClaimMiss::OtherQueue { .. } => "other_queue",
            ClaimMiss::Capped => "capped",
        }
    }
}

/// How an attempt ended, as reported by the worker that ran it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishOutcome {
    /// The handler succeeded.
    Succeeded,
    /// A retryable failure: RETRY_WAIT after `delay`, or FAILED when the
    /// attempts are exhausted.
    Retry {
        /// How long to wait before the next attempt (from the database's now()).
        delay: std::time::Duration,
        /// Stable error code.
        code: String,
        /// Human-readable message.
        message: String,
    },
    /// A fatal failure: FAILED at once.
    Fail {
        /// Stable error code.
        code: String,
        /// Human-readable message.
        message: String,
    },
    /// The handler stopped because a cancel was requested: CANCELLED.
    CancelAcknowledged,
    /// No handler ever started it: a job claimed ahead of the free slots
    /// (a worker's local queue) and given back before its turn came (at
    /// shutdown, on a cancel request or a lost lease, or after a long wait
    /// for a slot). Its attempt is uncounted and it is due again at once
    /// (RETRY_WAIT with its `run_after` unchanged), or CANCELLED if a cancel
    /// was requested meanwhile.
    Returned,
}

impl FinishOutcome {
    pub(crate) fn sql_kind(&self) -> &'static str {
        match self {
            FinishOutcome::Succeeded => "succeeded",
            FinishOutcome::Retry { .. } => "retry",
            FinishOutcome::Fail { .. } => "failed",
            FinishOutcome::CancelAcknowledged => "cancel_ack",
            FinishOutcome::Returned => "returned",
        }
    }
}

/// The recorded result of one reported outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishResult {
    /// Written; the job is now in `state` (RETRY_WAIT with `run_after`, or terminal).
    Recorded {
        /// The job.
        job_id: Uuid,
        /// Its new state.
        state: JobState,
        /// When it may run again (meaningful for RETRY_WAIT).
        run_after: DateTime<Utc>,
        /// For a job now CANCELLED whose cancel was requested while it ran:
        /// how long ago the request was made (database clock).
        cancel_latency: Option<std::time::Duration>,
    },
    /// The lease was lost; nothing was written.
    Fenced {
        /// The job.
        job_id: Uuid,
    },
}

/// The result of renewing one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatResult {
    /// Renewed: the caller still holds the lease.
    Held {
        /// The job.
        job_id: Uuid,
        /// True when an operator asked to cancel it (state CANCEL_REQUESTED).
        cancel_requested: bool,
        /// The new expiry (database clock).
        lease_expires_at: DateTime<Utc>,
    },
    /// The lease was lost: stop working on this job.
    Fenced {
        /// The job.
        job_id: Uuid,
    },
}

/// What a cancel request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestCancelOutcome {
    /// It had not started: CANCELLED now.
    Cancelled,
    /// It is running: CANCEL_REQUESTED, its worker will see it at the next heartbeat.
    CancelRequested,
    /// A cancel had already been requested; nothing changed.
    AlreadyRequested,
}

/// How a queue's jobs are dispatched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "dispatch", rename_all = "snake_case")]
pub enum Dispatch {
    /// Workers claim with SKIP LOCKED, woken by NOTIFY.
    Postgres,
    /// Wake-ups go through the outbox to a broker topic.
    Broker {
        /// The outbox topic.
        topic: String,
    },
}

/// As logs and messages name it: `postgres`, or `broker (topic T)`.
impl std::fmt::Display for Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dispatch::Postgres => f.write_str("postgres"),
            Dispatch::Broker { topic } => write!(f, "broker (topic {topic})"),
        }
    }
}

/// The public view of one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct JobStatus {
    /// The job's id (UUIDv7: time-ordered).
    pub job_id: Uuid,
    /// The queue it is claimed from.
    pub queue: String,
    /// Which handler runs it.
    pub job_type: String,
    /// Lower runs first within its queue.
    pub priority: i16,
    /// The handler's input, as enqueued. A stored payload that is not JSON
    /// this library can read (a number beyond a double's range, nesting
    /// deeper than 128: see [`ClaimedJob::unreadable_payload`]) is shown as
    /// a string holding its text.
    #[sqlx(try_from = "crate::store::PayloadText")]
    pub payload: Value,
    /// Where it is in its lifecycle.
    pub state: JobState,
    /// Attempts made so far (counted at claim).
    pub attempt_count: i32,
    /// Attempt budget.
    pub max_attempts: i32,
    /// Earliest time of the next claim (the next attempt time when waiting).
    pub run_after: DateTime<Utc>,
    /// Holder of the lease, while RUNNING / CANCEL_REQUESTED.
    pub lease_owner: Option<String>,
    /// Lease expiry, while held.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Current fencing token.
    pub lease_generation: LeaseGeneration,
    /// Last heartbeat (or the claim) of the current or last holder.
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Idempotency key.
    pub dedup_key: Option<String>,
    /// Why the previous attempt failed (kept after the job ends).
    pub last_error_code: Option<String>,
    /// Message of the previous failure.
    pub last_error: Option<String>,
    /// Enqueued at.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When it reached a terminal state.
    pub finished_at: Option<DateTime<Utc>>,
    /// The schedule whose occurrence created it.
    pub schedule_name: Option<String>,
    /// That occurrence's nominal instant.
    pub scheduled_for: Option<DateTime<Utc>>,
    /// When a lease on it last expired without a heartbeat (its worker died
    /// or froze), as the sweeper found it.
    pub lease_expired_at: Option<DateTime<Utc>>,
    /// The tenant it works for, if any.
    #[sqlx(default)]
    pub tenant: Option<String>,
    /// True when read from `jobs_history`.
    pub archived: bool,
}

/// One group of dead letters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct DeadLetterGroup {
    /// Job type.
    pub job_type: String,
    /// Error code of the last attempt.
    pub last_error_code: Option<String>,
    /// How many jobs.
    pub jobs: i64,
    /// Oldest failure in the group.
    pub first_failed_at: Option<DateTime<Utc>>,
    /// Newest failure in the group.
    pub last_failed_at: Option<DateTime<Utc>>,
    /// The newest failure's message.
    pub sample_error: Option<String>,
}

/// Which jobs a listing shows (every filter optional), and where its page
/// starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFilter {
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Only jobs of this queue.
    pub queue: Option<String>,
    /// Only jobs of this type.
    pub job_type: Option<String>,
    /// Only jobs older than this one (the last id of the previous page).
    pub before: Option<Uuid>,
    /// Only jobs whose id starts with these hex digits (dashes ignored).
    pub id_prefix: Option<String>,
    /// Only jobs whose last error has this code (a dead-letter group).
    pub error_code: Option<String>,
    /// Only jobs of this tenant.
    pub tenant: Option<String>,
}

/// One queue as an operator sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct QueueOverview {
    /// The queue.
    pub queue: String,
    /// `postgres` or `broker`.
    pub dispatch: String,
    /// The broker topic of a broker-dispatched queue.
    pub topic: Option<String>,
    /// Whether claims are paused.
    pub paused: bool,
    /// Jobs QUEUED.
    pub queued: i64,
    /// Jobs RUNNING.
    pub running: i64,
    /// Jobs RETRY_WAIT.
    pub retry_wait: i64,
    /// Jobs CANCEL_REQUESTED.
    pub cancel_requested: i64,
    /// Jobs SUCCEEDED, still in the hot table.
    pub succeeded: i64,
    /// Jobs FAILED (dead letters).
    pub failed: i64,
    /// Jobs CANCELLED, still in the hot table.
    pub cancelled: i64,
    /// Jobs RUNNING or CANCEL_REQUESTED whose lease has expired and that no
    /// sweeper has returned yet (their worker died or froze).
    pub lease_expired: i64,
    /// Seconds since the oldest due, claimable job became due, or was
    /// enqueued if it was due before that (none: no job is waiting).
    pub oldest_runnable_age_s: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_state_is_told_the_spellings() {
        let err = "BOGUS".parse::<JobState>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown job state \"BOGUS\": one of QUEUED, RUNNING, RETRY_WAIT, SUCCEEDED, FAILED, CANCEL_REQUESTED, CANCELLED"
        );
    }

    #[test]
    fn states_round_trip_through_their_contract_spelling() {
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>().unwrap(), state);
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                Value::String(state.as_str().into())
            );
        }
        assert!("running".parse::<JobState>().is_err());
    }

    #[test]
    fn state_classes_partition_the_states() {
        for state in JobState::ALL {
            let classes = [state.is_terminal(), state.is_claimable(), state.is_held()];
            assert_eq!(classes.iter().filter(|c| **c).count(), 1, "{state}");
        }
    }
}
