//! Transactional enqueue: validation, batch insert and dedup resolution.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Acquire, PgConnection, Postgres};
use uuid::Uuid;

use crate::{EnqueuedJob, Error, JobState, NewJob, Result};

/// Longest job type or queue name accepted.
const MAX_NAME_LEN: usize = 255;
/// Longest dedup key accepted, in bytes.
pub const MAX_DEDUP_KEY_LEN: usize = 1024;
/// How often a batch enqueue re-reads keys that a concurrent transaction
/// committed while it ran, before giving up with [`Error::DedupContention`].
const DEDUP_RESOLVE_ROUNDS: usize = 3;

/// The enqueue: [`Enqueuer::validate`] checks a job before anything is
/// written, [`Enqueuer::enqueue_many`] writes. [`enqueue`] and
/// [`enqueue_many`] are shorthands.
///
/// The payload limit is not checked here but by the database, against
/// `job_settings.max_payload_bytes` (see [`set_max_payload_bytes`]): the one
/// limit the Rust library, the SQL function `jobwire_enqueue` and the HTTP
/// API all read. An oversized payload fails the statement with
/// [`Error::PayloadTooLarge`] and writes nothing (inside a caller's
/// transaction, that transaction is then aborted, as after any failed
/// statement).
///
/// [`set_max_payload_bytes`]: crate::set_max_payload_bytes
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Enqueuer;

/// What is wrong with a job type, queue or tenant name, if anything: blank,
/// longer than 255 bytes, or holding a control character (the SQL
/// enqueue's rules too).
pub(crate) fn name_problem(value: &str) -> Option<String> {
    if value.trim().is_empty() {
        Some("must not be empty".into())
    } else if value.len() > MAX_NAME_LEN {
        Some(format!("longer than {MAX_NAME_LEN} bytes"))
    } else if value.chars().any(char::is_control) {
        // A name is printed where terminals obey escape sequences, and
        // listed one to a line (migration 20261206000009 says the same).
        Some("must not hold control characters (a newline, a tab, an escape)".into())
    } else {
        None
    }
}

/// Every job is due before this instant (the start of the year 10000).
fn due_before() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(253_402_300_800, 0).expect("a time chrono can hold")
}

/// Every job is due from this instant on (the start of the year 1).
fn due_from() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(-62_135_596_800, 0).expect("a time chrono can hold")
}

/// Columns of a validated batch, ready to bind as arrays.
#[derive(Default)]
struct EnqueueColumns {
    job_ids: Vec<Uuid>,
    queues: Vec<String>,
    job_types: Vec<String>,
    priorities: Vec<i16>,
    payloads: Vec<Value>,
    max_attempts: Vec<i32>,
    run_ats: Vec<Option<DateTime<Utc>>>,
    delays_ms: Vec<Option<i64>>,
    dedup_keys: Vec<Option<String>>,
    traceparents: Vec<Option<String>>,
    tracestates: Vec<Option<String>>,
    tenants: Vec<Option<String>>,
}

/// The everyday enqueue: one job, no dedup key, so no key to resolve and
/// nothing to return but the new row (`sql/enqueue_one.sql`).
async fn enqueue_one_without_key(conn: &mut PgConnection, job: &NewJob) -> Result<EnqueuedJob> {
    let current_trace = crate::TraceContext::current();
    let trace = job.trace_context.as_ref().or(current_trace.as_ref());
    let (job_id, state, run_after, created_at) =
        sqlx::query_as(include_str!("../../sql/enqueue_one.sql"))
            .bind(Uuid::now_v7())
            .bind(&job.queue)
            .bind(&job.job_type)
            .bind(job.priority)
            .bind(&job.payload)
            .bind(job.max_attempts)
            .bind(job.run_at)
            .bind(job.delay.map(|delay| delay.num_milliseconds()))
            .bind(trace.map(|trace| trace.traceparent.as_str()))
            .bind(trace.and_then(|trace| trace.tracestate.as_deref()))
            .bind(job.tenant.as_deref())
            .fetch_one(&mut *conn)
            .await?;
    Ok(EnqueuedJob {
        job_id,
        duplicate: false,
        state,
        run_after,
        created_at,
    })
}

#[derive(sqlx::FromRow)]
struct EnqueueRow {
    ord: i64,
    job_id: Option<Uuid>,
    duplicate: bool,
    state: Option<JobState>,
    run_after: Option<DateTime<Utc>>,
    created_at: Option<DateTime<Utc>>,
}

impl Enqueuer {
    /// Check a job before anything is written (everything but the payload
    /// size, which the database checks; the payload is walked once, for a
    /// NUL). `jobwire_enqueue` in SQL applies
    /// the same rules; a test runs one table of cases through both.
    pub fn validate(&self, job: &NewJob) -> Result<()> {
        fn name(field: &'static str, value: &str) -> Result<()> {
            match name_problem(value) {
                Some(reason) => Err(Error::InvalidJob { field, reason }),
                None => Ok(()),
            }
        }
        name("job_type", &job.job_type)?;
        name("queue", &job.queue)?;
        if job.max_attempts < 1 {
            return Err(Error::InvalidJob {
                field: "max_attempts",
                reason: format!("must be at least 1, got {}", job.max_attempts),
            });
        }
        if job.run_at.is_some() && job.delay.is_some() {
            return Err(Error::InvalidJob {
                field: "delay",
                reason: "give run_at or delay, not both".into(),
            });
        }
        if let Some(delay) = job.delay
            && delay < chrono::TimeDelta::zero()
        {
            return Err(Error::InvalidJob {
                field: "delay",
                reason: format!("must not be negative, got {} ms", delay.num_milliseconds()),
            });
        }
        // The schema's own bounds (migrations 20261206000005 and 6): past
        // them, no client could read the job back.
        let due_before = due_before();
        if job
            .run_at
            .is_some_and(|at| at < due_from() || at >= due_before)
        {
            return Err(Error::InvalidJob {
                field: "run_at",
                reason: "must be from the year 1 on and before the year 10000".into(),
            });
        }
        if let Some(delay) = job.delay
            && Utc::now()
                .checked_add_signed(delay)
                .is_none_or(|due| due >= due_before)
        {
            return Err(Error::InvalidJob {
                field: "delay",
                reason: "must make the job due before the year 10000".into(),
            });
        }
        if let Some(key) = &job.dedup_key
            && (key.is_empty() || key.len() > MAX_DEDUP_KEY_LEN)
        {
            return Err(Error::InvalidJob {
                field: "dedup_key",
                reason: format!("must be 1 to {MAX_DEDUP_KEY_LEN} bytes"),
            });
        }
        // PostgreSQL's text and jsonb cannot hold U+0000: refused here by
        // field, not by the database as a data error naming none.
        if job.dedup_key.as_ref().is_some_and(|key| key.contains('\0')) {
            return Err(Error::InvalidJob {
                field: "dedup_key",
                reason: "must not contain NUL (U+0000), which PostgreSQL cannot store".into(),
            });
        }
        if holds_nul(&job.payload) {
            return Err(Error::InvalidJob {
                field: "payload",
                reason: "a string in it holds \\u0000 (NUL), which PostgreSQL's jsonb cannot store: remove it".into(),
            });
        }
        if let Some(key) = &job.dedup_key
            && key.starts_with(crate::schedule::OCCURRENCE_KEY_PREFIX)
        {
            return Err(Error::InvalidJob {
                field: "dedup_key",
                reason: format!(
                    "keys beginning with {:?} are kept for schedules' occurrences",
                    crate::schedule::OCCURRENCE_KEY_PREFIX
                ),
            });
        }
        if let Some(tenant) = &job.tenant {
            name("tenant", tenant)?;
        }
        if let Some(context) = &job.trace_context {
            context
                .validate()
                .map_err(|(field, reason)| Error::InvalidJob { field, reason })?;
        }
        Ok(())
    }

    /// Enqueue one job (see [`Enqueuer::enqueue_many`]).
    pub async fn enqueue<'a, A>(&self, conn: A, job: &NewJob) -> Result<EnqueuedJob>
    where
        A: Acquire<'a, Database = Postgres>,
    {
        let mut enqueued = self.enqueue_many(conn, std::slice::from_ref(job)).await?;
        Ok(enqueued.remove(0))
    }

    /// Enqueue many jobs in one statement, inside the caller's transaction
    /// when given one. The job rows and, for broker-dispatched queues, their
    /// wake-up outbox rows are written together (by the schema's trigger):
    /// rollback loses both, commit keeps both. Results come back in input order.
    /// A job whose dedup key is already held comes back as that job with
    /// `duplicate = true`. Every job is validated before anything is written.
    ///
    /// Given a pool or a bare connection rather than a transaction, each
    /// statement commits on its own. Usually there is one; a batch whose
    /// dedup keys concurrent transactions take while it runs needs more, and
    /// if a later one fails ([`Error::DedupContention`], a lost connection)
    /// the jobs of the first are already written, and sending the batch again
    /// writes its keyless jobs twice. Give a transaction for all or nothing.
    pub async fn enqueue_many<'a, A>(&self, conn: A, jobs: &[NewJob]) -> Result<Vec<EnqueuedJob>>
    where
        A: Acquire<'a, Database = Postgres>,
    {
        let mut conn = conn.acquire().await?;
        self.enqueue_many_on(&mut conn, jobs).await
    }

    /// [`Enqueuer::enqueue`] on a connection or transaction
    /// (`&mut *tx`). Not generic, so its future is `Send` for any caller:
    /// use it in code spawned onto a multi-threaded runtime, where the
    /// generic form can trip the compiler's lifetime checks.
    pub async fn enqueue_on(&self, conn: &mut PgConnection, job: &NewJob) -> Result<EnqueuedJob> {
        let mut enqueued = self
            .enqueue_many_on(conn, std::slice::from_ref(job))
            .await?;
        Ok(enqueued.remove(0))
    }

    /// [`Enqueuer::enqueue_many`] on a connection or transaction; see
    /// [`Enqueuer::enqueue_on`].
    pub async fn enqueue_many_on(
        &self,
        conn: &mut PgConnection,
        jobs: &[NewJob],
    ) -> Result<Vec<EnqueuedJob>> {
        for job in jobs {
            self.validate(job)?;
        }
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        if let [job] = jobs
            && job.dedup_key.is_none()
        {
            return Ok(vec![enqueue_one_without_key(conn, job).await?]);
        }
        let mut results: Vec<Option<EnqueuedJob>> = vec![None; jobs.len()];
        // Indices into `jobs` still to write; after the first round only rows
        // whose key a concurrent transaction committed mid-statement remain.
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        let mut job_ids: Vec<Uuid> = jobs.iter().map(|_| Uuid::now_v7()).collect();
        // A job without a trace context of its own records the span this
        // enqueue runs in (when there is an OpenTelemetry trace).
        let current_trace = crate::TraceContext::current();
        for _ in 0..DEDUP_RESOLVE_ROUNDS {
            let mut columns = EnqueueColumns::default();
            for &index in &pending {
                let job = &jobs[index];
                columns.job_ids.push(job_ids[index]);
                columns.queues.push(job.queue.clone());
                columns.job_types.push(job.job_type.clone());
                columns.priorities.push(job.priority);
                columns.payloads.push(job.payload.clone());
                columns.max_attempts.push(job.max_attempts);
                columns.run_ats.push(job.run_at);
                columns
                    .delays_ms
                    .push(job.delay.map(|delay| delay.num_milliseconds()));
                columns.dedup_keys.push(job.dedup_key.clone());
                let trace = job.trace_context.as_ref().or(current_trace.as_ref());
                columns
                    .traceparents
                    .push(trace.map(|trace| trace.traceparent.clone()));
                columns
                    .tracestates
                    .push(trace.and_then(|trace| trace.tracestate.clone()));
                columns.tenants.push(job.tenant.clone());
            }
            let rows: Vec<EnqueueRow> = sqlx::query_as(include_str!("../../sql/enqueue_many.sql"))
                .bind(&columns.job_ids)
                .bind(&columns.queues)
                .bind(&columns.job_types)
                .bind(&columns.priorities)
                .bind(&columns.payloads)
                .bind(&columns.max_attempts)
                .bind(&columns.run_ats)
                .bind(&columns.delays_ms)
                .bind(&columns.dedup_keys)
                .bind(&columns.traceparents)
                .bind(&columns.tracestates)
                .bind(&columns.tenants)
                .fetch_all(&mut *conn)
                .await?;
            let mut unresolved = Vec::new();
            for row in rows {
                let index = pending[usize::try_from(row.ord - 1).expect("ordinality from 1")];
                match (row.job_id, row.state, row.run_after, row.created_at) {
                    (Some(job_id), Some(state), Some(run_after), Some(created_at)) => {
                        results[index] = Some(EnqueuedJob {
                            job_id,
                            duplicate: row.duplicate,
                            state,
                            run_after,
                            created_at,
                        });
                    }
                    _ => unresolved.push(index),
                }
            }
            if unresolved.is_empty() {
                return Ok(results.into_iter().map(|r| r.expect("resolved")).collect());
            }
            // A fresh id for the retry: the old one was never inserted.
            for &index in &unresolved {
                job_ids[index] = Uuid::now_v7();
            }
            pending = unresolved;
        }
        let job = &jobs[pending[0]];
        Err(Error::DedupContention {
            job_type: job.job_type.clone(),
            dedup_key: job.dedup_key.clone().unwrap_or_default(),
        })
    }
}

/// Enqueue one job with the default limits. See [`Enqueuer::enqueue_many`].
pub async fn enqueue<'a, A>(conn: A, job: &NewJob) -> Result<EnqueuedJob>
where
    A: Acquire<'a, Database = Postgres>,
{
    Enqueuer.enqueue(conn, job).await
}

/// Enqueue many jobs in one statement with the default limits.
/// See [`Enqueuer::enqueue_many`].
pub async fn enqueue_many<'a, A>(conn: A, jobs: &[NewJob]) -> Result<Vec<EnqueuedJob>>
where
    A: Acquire<'a, Database = Postgres>,
{
    Enqueuer.enqueue_many(conn, jobs).await
}

/// Whether a string or key anywhere in `value` holds U+0000. Walked with a
/// stack of its own: a value built in code may nest deeper than the stack
/// allows recursion.
fn holds_nul(value: &Value) -> bool {
    let mut left = vec![value];
    while let Some(value) = left.pop() {
        match value {
            Value::String(text) if text.contains('\0') => return true,
            Value::Array(items) => left.extend(items),
            Value::Object(fields) => {
                if fields.keys().any(|key| key.contains('\0')) {
                    return true;
                }
                left.extend(fields.values());
            }
            _ => {}
        }
    }
    false
}
