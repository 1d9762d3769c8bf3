//! The demo's tenants: one tenant's import held to its cap of running jobs
//! while another tenant's report runs beside it, and an enqueue over a
//! tenant's limit of waiting jobs refused whole.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use jobwire_core::{Error, JobState, NewJob, TenantLimits};
use serde_json::json;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The tenant with a big import and a cap on its running jobs.
const CAPPED: &str = "acme";
const CAP: u32 = 2;
const IMPORT_ROWS: usize = 6;
const IMPORT_ROW_MS: u64 = 250;
/// The tenant whose report is enqueued behind the import.
const BESIDE: &str = "globex";
/// The tenant with a limit on its waiting jobs.
const LIMITED: &str = "initech";
const LIMITED_QUEUED: u32 = 3;

/// The tenants' jobs, to follow and to judge once the worker is done.
pub(super) struct TenantJobs {
    pub(super) tracked: Vec<(String, Uuid, JobState)>,
    imports: Vec<Uuid>,
    report: Uuid,
}

/// Set the tenants' limits on `queue` (again on every run: limits stay in
/// the database, where the dashboard's Tenants page shows them), show an
/// enqueue over a limit refused with nothing written, and enqueue the
/// import and the report.
pub(super) async fn enqueue(pool: &PgPool, queue: &str) -> Result<TenantJobs> {
    let cap = TenantLimits {
        max_running: Some(CAP),
        ..TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(pool, queue, Some(CAPPED), &cap).await?;
    let limit = TenantLimits {
        max_queued: Some(LIMITED_QUEUED),
        ..TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(pool, queue, Some(LIMITED), &limit).await?;

    refuse_over_limit(pool, queue).await?;

    // `sleep` takes nothing but its `ms`: the rows are told apart by id.
    let row = NewJob::new("sleep", json!({"ms": IMPORT_ROW_MS}))
        .with_queue(queue)
        .with_tenant(CAPPED);
    let import = vec![row; IMPORT_ROWS];
    let imports: Vec<Uuid> = jobwire_core::enqueue_many(pool, &import)
        .await?
        .iter()
        .map(|job| job.job_id)
        .collect();
    // Enqueued after the whole import, as a quiet tenant's job would be.
    let report = jobwire_core::enqueue(
        pool,
        &NewJob::new("noop", json!({"report": "monthly"}))
            .with_queue(queue)
            .with_tenant(BESIDE),
    )
    .await?
    .job_id;
    let mut tracked: Vec<(String, Uuid, JobState)> = imports
        .iter()
        .enumerate()
        .map(|(row, id)| {
            (
                format!("{CAPPED} import row {} (cap {CAP})", row + 1),
                *id,
                JobState::Succeeded,
            )
        })
        .collect();
    tracked.push((
        format!("{BESIDE} report (after the import)"),
        report,
        JobState::Succeeded,
    ));
    outln!(
        "tenants: {CAPPED} enqueued an import of {IMPORT_ROWS} jobs, at most {CAP} running at once; {BESIDE} enqueued a report behind it"
    );
    Ok(TenantJobs {
        tracked,
        imports,
        report,
    })
}

/// One statement holding one job more than the limited tenant may have
/// waiting: refused whole, with nothing written.
async fn refuse_over_limit(pool: &PgPool, queue: &str) -> Result<()> {
    let before = tenant_jobs(pool, queue, LIMITED).await?;
    let over: Vec<NewJob> = (0..=LIMITED_QUEUED)
        .map(|n| {
            NewJob::new("noop", json!({"invoice": n}))
                .with_queue(queue)
                .with_tenant(LIMITED)
        })
        .collect();
    let refusal = match jobwire_core::enqueue_many(pool, &over).await {
        Err(refusal @ Error::QueueFull { .. }) => refusal,
        Err(other) => return Err(other.into()),
        Ok(_) => bail!("{LIMITED}'s limit of {LIMITED_QUEUED} waiting jobs did not hold"),
    };
    let after = tenant_jobs(pool, queue, LIMITED).await?;
    if after != before {
        bail!("the refused enqueue wrote {} jobs", after - before);
    }
    outln!(
        "enqueue limit: {LIMITED} may have {LIMITED_QUEUED} jobs waiting; {} jobs in one statement were refused whole ({}: {refusal}); nothing written",
        over.len(),
        refusal.code()
    );
    Ok(())
}

async fn tenant_jobs(pool: &PgPool, queue: &str, tenant: &str) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE queue = $1 AND tenant = $2")
            .bind(queue)
            .bind(tenant)
            .fetch_one(pool)
            .await?,
    )
}

/// Samples how many of the capped tenant's jobs run at once, until stopped.
pub(super) struct RunningWatch {
    stop: CancellationToken,
    task: JoinHandle<Result<i64>>,
}

impl RunningWatch {
    pub(super) fn start(pool: PgPool, queue: &str) -> Self {
        let stop = CancellationToken::new();
        let queue = queue.to_owned();
        let until = stop.clone();
        let task = tokio::spawn(async move {
            let mut most = 0;
            while !until.is_cancelled() {
                let running: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM jobs WHERE queue = $1 AND tenant = $2 \
                     AND state IN ('RUNNING', 'CANCEL_REQUESTED')",
                )
                .bind(&queue)
                .bind(CAPPED)
                .fetch_one(&pool)
                .await
                .context("sampling the capped tenant's running jobs")?;
                most = most.max(running);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(most)
        });
        RunningWatch { stop, task }
    }

    /// The most of the capped tenant's jobs seen running at once.
    pub(super) async fn stop(self) -> Result<i64> {
        self.stop.cancel();
        self.task.await.context("the running-jobs watch panicked")?
    }
}

/// Say what the cap did, and fail the demo if it did not hold or the
/// report waited behind the import.
pub(super) async fn judge(pool: &PgPool, jobs: &TenantJobs, most_running: i64) -> Result<()> {
    let finished = |id: Uuid| async move {
        let status = jobwire_core::job_status(pool, id).await?;
        let finished = status
            .finished_at
            .with_context(|| format!("job {id} has not finished"))?;
        anyhow::Ok((status.created_at, finished))
    };
    let mut import_enqueued: Option<DateTime<Utc>> = None;
    let mut import_end: Option<DateTime<Utc>> = None;
    for id in &jobs.imports {
        let (created, finished) = finished(*id).await?;
        import_enqueued = Some(import_enqueued.map_or(created, |at| at.min(created)));
        import_end = Some(import_end.map_or(finished, |at| at.max(finished)));
    }
    let (import_enqueued, import_end) =
        import_enqueued.zip(import_end).context("no import jobs")?;
    let (report_created, report_finished) = finished(jobs.report).await?;
    let ms = |from: DateTime<Utc>, to: DateTime<Utc>| (to - from).num_milliseconds();
    outln!(
        "tenants: {CAPPED}'s import finished {} ms after its enqueue, at most {most_running} running at once (sampled every 10 ms); {BESIDE}'s report, enqueued behind it, {} ms after its own, while the import ran",
        ms(import_enqueued, import_end),
        ms(report_created, report_finished)
    );
    if most_running > i64::from(CAP) {
        bail!("{CAPPED} had {most_running} jobs running at once, over its cap of {CAP}");
    }
    if report_finished >= import_end {
        bail!("{BESIDE}'s report waited for {CAPPED}'s whole import");
    }
    Ok(())
}
