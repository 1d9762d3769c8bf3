//! `jobwire enqueue`: its arguments and enqueueing one job.

use anyhow::{Context, Result, bail};
use chrono::{DateTime, TimeDelta, Utc};
use jobwire_core::NewJob;
use sqlx::PgPool;

/// The fields of a job, shared by `jobwire enqueue` and `jobwire schedule put`.
#[derive(clap::Args)]
pub(crate) struct JobFields {
    /// Payload as JSON.
    #[arg(long, default_value = "{}")]
    payload: String,
    /// Queue to enqueue on.
    #[arg(long, default_value = NewJob::DEFAULT_QUEUE)]
    queue: String,
    /// Priority; lower runs first.
    #[arg(long, default_value_t = 0)]
    priority: i16,
    /// Attempts before the job is dead-lettered.
    #[arg(long, default_value_t = NewJob::DEFAULT_MAX_ATTEMPTS)]
    max_attempts: i32,
}

impl JobFields {
    /// A job of `job_type` with these fields; the payload must be JSON.
    pub(crate) fn into_job(self, job_type: String) -> Result<NewJob> {
        let mut payload: serde_json::Value = serde_json::from_str(&self.payload)
            .with_context(|| format!("--payload is not valid JSON: {}", self.payload))?;
        // As over HTTP: a number the parsed payload would hold as another
        // (past 64 bits, more digits than a double's) is refused, not rounded.
        if let Some(number) =
            jobwire_core::json_numbers::first_inexact_number(self.payload.as_bytes())
        {
            bail!(
                "--payload holds the number {number}, which would be stored as another \
                 (numbers are kept as 64-bit integers or doubles, at most 17 significant digits): \
                 write it as a string"
            );
        }
        // `null` is "no payload", as over HTTP: the default `{}`.
        if payload.is_null() {
            payload = serde_json::json!({});
        }
        Ok(NewJob::new(job_type, payload)
            .with_queue(self.queue)
            .with_priority(self.priority)
            .with_max_attempts(self.max_attempts))
    }
}

#[derive(clap::Args)]
pub(crate) struct EnqueueArgs {
    /// Job type (the handler that runs it).
    job_type: String,
    #[command(flatten)]
    job: JobFields,
    /// Run no earlier than this many milliseconds from now.
    #[arg(long, conflicts_with = "run_at")]
    delay_ms: Option<i64>,
    /// Run no earlier than this RFC 3339 time (e.g. 2030-01-01T09:00:00Z).
    #[arg(long, value_parser = jobwire_core::parse_time)]
    run_at: Option<DateTime<Utc>>,
    /// Idempotency key: enqueueing the same (type, key) again returns the first job.
    #[arg(long)]
    dedup_key: Option<String>,
    /// The tenant the job works for (counted against the queue's tenant cap).
    #[arg(long)]
    tenant: Option<String>,
    /// Print JSON instead of the bare id.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn enqueue(pool: &PgPool, args: EnqueueArgs) -> Result<()> {
    let mut job = args.job.into_job(args.job_type)?;
    if let Some(delay) = args.delay_ms {
        // Past chrono's range (i64::MIN): the check below names the field.
        let delay = TimeDelta::try_milliseconds(delay).unwrap_or(TimeDelta::MIN);
        job = job.with_delay(delay);
    }
    if let Some(at) = args.run_at {
        job = job.with_run_at(at);
    }
    if let Some(key) = args.dedup_key {
        job = job.with_dedup_key(key);
    }
    if let Some(tenant) = args.tenant {
        job = job.with_tenant(tenant);
    }
    let enqueued = jobwire_core::enqueue(pool, &job).await?;
    if args.json {
        outln!("{}", crate::output::json_pretty(&enqueued)?);
    } else {
        outln!("{}", enqueued.job_id);
        if enqueued.duplicate {
            eprintln!("duplicate: a job with this dedup key already exists");
        }
    }
    Ok(())
}
