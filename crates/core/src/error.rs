use std::time::Duration;

use uuid::Uuid;

use crate::{JobState, LeaseGeneration};

/// Errors from the job store. Each variant has a stable [`Error::code`] that
/// APIs and logs expose.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The writer no longer holds the lease it names: the job was swept,
    /// reclaimed by another claim (a higher generation), or already finished.
    /// The worker must stop without reporting anything else for this attempt.
    #[error(
        "lease lost on job {job_id}: generation {generation} held by {owner} is no longer current"
    )]
    Fenced {
        /// The job the write was for.
        job_id: Uuid,
        /// The lease owner the writer claimed to be.
        owner: String,
        /// The generation the writer held.
        generation: LeaseGeneration,
    },
    /// No job with this id (in the hot table or in history).
    #[error("job {0} not found")]
    NotFound(Uuid),
    /// The job is already in a terminal state.
    #[error("job {job_id} already finished as {state}")]
    AlreadyFinished {
        /// The job.
        job_id: Uuid,
        /// Its terminal state.
        state: JobState,
    },
    /// The job is not in a state this operation applies to.
    #[error("job {job_id} is {state}: {reason}")]
    WrongState {
        /// The job.
        job_id: Uuid,
        /// Its current state.
        state: JobState,
        /// What the operation needed.
        reason: &'static str,
    },
    /// A job failed validation before anything was written.
    #[error("invalid job: {field}: {reason}")]
    InvalidJob {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An argument other than a job was rejected before anything was
    /// written (an empty replay actor, an empty effect key, ...).
    #[error("invalid argument {argument}: {reason}")]
    InvalidArgument {
        /// The offending argument.
        argument: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The payload is larger than the configured limit.
    #[error("payload is {size} bytes, over the limit of {limit} bytes (store ids, not objects)")]
    PayloadTooLarge {
        /// Serialized payload size in bytes.
        size: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The enqueue was refused because its queue, or its tenant on that
    /// queue, holds as many waiting jobs as it may (or, `reason = Shed`,
    /// the queue is deep enough that only urgent jobs get in). Nothing was
    /// written; try again after `retry_after`, by when jobs may have drained.
    #[error("{message} (retry after {retry_after:?})")]
    QueueFull {
        /// Which limit refused it.
        reason: FullReason,
        /// The queue.
        queue: String,
        /// The tenant, when the enqueue named one.
        tenant: Option<String>,
        /// The limit in force: the most waiting jobs, or for `Shed` the
        /// depth from which low-priority jobs are refused.
        limit: u32,
        /// A hint, not a promise: the depth is checked again at each enqueue.
        retry_after: Duration,
        /// The database's message, for a person.
        message: String,
    },
    /// The enqueue was refused because its tenant is over its enqueue rate
    /// on that queue. Nothing was written; the rate allows this many jobs
    /// again after `retry_after` (if nobody else of the tenant enqueues).
    #[error("{message} (retry after {retry_after:?})")]
    RateLimited {
        /// The queue.
        queue: String,
        /// The tenant.
        tenant: String,
        /// Jobs allowed per `per_seconds`.
        limit: u32,
        /// The window of the rate, in seconds.
        per_seconds: u32,
        /// When the same enqueue would fit the rate.
        retry_after: Duration,
        /// The database's message, for a person.
        message: String,
    },
    /// A concurrent enqueue kept taking the same dedup key out from under us.
    #[error(
        "could not resolve dedup key {dedup_key:?} for job type {job_type}: concurrent enqueues"
    )]
    DedupContention {
        /// The job type.
        job_type: String,
        /// The contended key.
        dedup_key: String,
    },
    /// The database rejected a write because it would break the schema's
    /// rules (an illegal state transition, a lease on a job that is not held).
    #[error("the database rejected the change ({constraint}): {message}")]
    ConstraintViolation {
        /// The constraint or rule that fired.
        constraint: String,
        /// The database's message.
        message: String,
    },
    /// A value read from the database does not decode (a state spelling
    /// this version does not know, a column of an unexpected type): a schema
    /// and code mismatch, not an outage, so never retried.
    #[error("cannot decode a value read from the database: {0}")]
    Decode(String),
    /// Any other database failure (connection lost, timeout, ...).
    #[error("database error: {}", database_message(.0))]
    Database(sqlx::Error),
    /// Applying migrations failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl Error {
    /// A stable, machine-readable code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Fenced { .. } => "FENCED",
            Error::NotFound(_) => "NOT_FOUND",
            Error::AlreadyFinished { .. } => "ALREADY_FINISHED",
            Error::WrongState { .. } => "WRONG_STATE",
            Error::InvalidJob { .. } => "INVALID_JOB",
            Error::InvalidArgument { .. } => "INVALID_ARGUMENT",
            Error::PayloadTooLarge { .. } => "PAYLOAD_TOO_LARGE",
            Error::QueueFull { .. } => "QUEUE_FULL",
            Error::RateLimited { .. } => "RATE_LIMITED",
            Error::DedupContention { .. } => "DEDUP_CONTENTION",
            Error::ConstraintViolation { .. } => "CONSTRAINT_VIOLATION",
            Error::Decode(_) => "DECODE",
            Error::Database(_) => "DATABASE",
            Error::Migrate(_) => "MIGRATE",
        }
    }

    /// Whether retrying the same call later may succeed (the database was
    /// unreachable, a serialization failure, ...), as opposed to a verdict:
    /// the database's refusal of a value (a data exception, class 22, an
    /// integrity violation, 23, or a value past a limit such as an index
    /// entry's size, 54) is one, and comes again on every try.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Database(sqlx::Error::Database(db)) => !db.code().is_some_and(|code| {
                code.starts_with("22") || code.starts_with("23") || code.starts_with("54")
            }),
            Error::Database(_) | Error::DedupContention { .. } => true,
            _ => false,
        }
    }

    /// For a refusal that lifts with time ([`Error::QueueFull`],
    /// [`Error::RateLimited`]): how long to wait before trying again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::QueueFull { retry_after, .. } | Error::RateLimited { retry_after, .. } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }
}

/// Which enqueue limit refused a job ([`Error::QueueFull`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FullReason {
    /// The queue holds its most waiting jobs (`max_queued`).
    Queue,
    /// The tenant holds its most waiting jobs on the queue.
    Tenant,
    /// The queue is at its shedding depth and the job is less urgent than
    /// the queue then takes.
    Shed,
}

impl FullReason {
    /// The reason as the database and the API spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            FullReason::Queue => "queue",
            FullReason::Tenant => "tenant",
            FullReason::Shed => "shed",
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        // Check violations (including the state-machine trigger, which raises
        // one) are verdicts about the data, not outages: give them their own
        // variant so callers do not retry them.
        if let sqlx::Error::Database(db) = &err {
            match db.code().as_deref() {
                Some("23514") => {
                    return Error::ConstraintViolation {
                        constraint: db.constraint().unwrap_or("check").to_owned(),
                        message: db.message().to_owned(),
                    };
                }
                // The schema's own verdicts on an enqueue (jobwire_enqueue,
                // the payload limit of every enqueue statement).
                Some(code @ ("JW400" | "JW413" | "JW429" | "JW42R")) => {
                    let detail = db
                        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                        .and_then(|pg| pg.detail())
                        .unwrap_or_default();
                    if let Some(error) = enqueue_verdict(code, detail, db.message()) {
                        return error;
                    }
                }
                _ => {}
            }
        }
        match err {
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                Error::Decode(err.to_string())
            }
            sqlx::Error::ColumnNotFound(_) | sqlx::Error::TypeNotFound { .. } => {
                Error::Decode(err.to_string())
            }
            err => Error::Database(err),
        }
    }
}

/// The typed error for a verdict the schema raised on an enqueue: JW400 names
/// the field in its DETAIL, JW413 gives "<size> <limit>".
fn enqueue_verdict(code: &str, detail: &str, message: &str) -> Option<Error> {
    const FIELDS: [&str; 11] = [
        "job_type",
        "queue",
        "priority",
        "max_attempts",
        "dedup_key",
        "traceparent",
        "tracestate",
        "tenant",
        "payload",
        "run_after",
        "new_job_id",
    ];
    match code {
        "JW400" => {
            let field = FIELDS.into_iter().find(|field| *field == detail)?;
            let reason = message
                .strip_prefix("invalid job: ")
                .and_then(|rest| rest.strip_prefix(field))
                .and_then(|rest| rest.strip_prefix(": "))
                .unwrap_or(message);
            Some(Error::InvalidJob {
                field,
                reason: reason.to_owned(),
            })
        }
        "JW413" => {
            let (size, limit) = detail.split_once(' ')?;
            Some(Error::PayloadTooLarge {
                size: size.parse().ok()?,
                limit: limit.parse().ok()?,
            })
        }
        "JW429" | "JW42R" => limit_verdict(code, detail, message),
        _ => None,
    }
}

/// The DETAIL of an enqueue-limit refusal (migration
/// `20261201000010_enqueue_limits.sql`, `jobwire_refuse_enqueue`).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LimitDetail {
    reason: String,
    queue: String,
    tenant: Option<String>,
    limit: u32,
    seconds: Option<u32>,
    retry_after_ms: u64,
}

fn limit_verdict(code: &str, detail: &str, message: &str) -> Option<Error> {
    let detail: LimitDetail = serde_json::from_str(detail).ok()?;
    let retry_after = Duration::from_millis(detail.retry_after_ms);
    let message = message.to_owned();
    if code == "JW42R" {
        return Some(Error::RateLimited {
            queue: detail.queue,
            tenant: detail.tenant?,
            limit: detail.limit,
            per_seconds: detail.seconds?,
            retry_after,
            message,
        });
    }
    let reason = match detail.reason.as_str() {
        "queue" => FullReason::Queue,
        "tenant" => FullReason::Tenant,
        "shed" => FullReason::Shed,
        _ => return None,
    };
    Some(Error::QueueFull {
        reason,
        queue: detail.queue,
        tenant: detail.tenant,
        limit: detail.limit,
        retry_after,
        message,
    })
}

/// What the database said, for a person: its message and SQLSTATE, without
/// the PostgreSQL source line sqlx appends ("at line 621" names the
/// server's C code, not the caller's input), and what to do about the
/// data errors a caller can fix. Any other error (the network's) as it
/// reads.
pub fn database_message(err: &sqlx::Error) -> String {
    let sqlx::Error::Database(db) = err else {
        return err.to_string();
    };
    let code = db.code().unwrap_or_default();
    let hint = match code.as_ref() {
        // jsonb refuses the escape \u0000 anywhere in a document.
        "22P05" => "; a string in the JSON holds \\u0000, which PostgreSQL cannot store: remove it",
        _ => "",
    };
    format!("{} (SQLSTATE {code}){hint}", db.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_verdicts_become_typed_errors() {
        match enqueue_verdict("JW413", "70000 65536", "payload is ...") {
            Some(Error::PayloadTooLarge { size, limit }) => {
                assert_eq!((size, limit), (70000, 65536))
            }
            other => panic!("{other:?}"),
        }
        match enqueue_verdict("JW400", "queue", "invalid job: queue: must not be empty") {
            Some(Error::InvalidJob { field, reason }) => {
                assert_eq!((field, reason.as_str()), ("queue", "must not be empty"))
            }
            other => panic!("{other:?}"),
        }
        match enqueue_verdict(
            "JW42R",
            r#"{"reason":"rate","queue":"q","tenant":"acme","limit":5,"seconds":60,"retryAfterMs":1500}"#,
            "over",
        ) {
            Some(Error::RateLimited {
                tenant,
                limit,
                per_seconds,
                retry_after,
                ..
            }) => assert_eq!(
                (tenant.as_str(), limit, per_seconds, retry_after),
                ("acme", 5, 60, Duration::from_millis(1500))
            ),
            other => panic!("{other:?}"),
        }
        match enqueue_verdict(
            "JW429",
            r#"{"reason":"shed","queue":"q","tenant":null,"limit":100,"seconds":null,"retryAfterMs":1000}"#,
            "deep",
        ) {
            Some(Error::QueueFull {
                reason,
                tenant,
                limit,
                ..
            }) => assert_eq!((reason, tenant, limit), (FullReason::Shed, None, 100)),
            other => panic!("{other:?}"),
        }
        assert!(enqueue_verdict("JW429", "not json", "x").is_none());
        assert!(enqueue_verdict("JW400", "no_such_field", "x").is_none());
        assert!(enqueue_verdict("JW413", "garbage", "x").is_none());
    }
}
