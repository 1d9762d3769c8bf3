//! `jobwire status`: showing one job, as text or JSON.

use crate::output::visible;
use anyhow::Result;
use chrono::{DateTime, Utc};
use jobwire_core::JobStatus;
use sqlx::PgPool;
use uuid::Uuid;

pub(crate) async fn status(pool: &PgPool, job_id: Uuid, json: bool) -> Result<()> {
    let status = jobwire_core::job_status(pool, job_id).await?;
    if json {
        outln!("{}", crate::output::json_pretty(&status)?);
    } else {
        let now = jobwire_core::database_now(pool).await?;
        print_status(&status, now);
    }
    Ok(())
}

/// `now`: the database's clock, which leases are timed by.
fn print_status(status: &JobStatus, now: DateTime<Utc>) {
    let time =
        |at: Option<DateTime<Utc>>| at.map(|at| at.to_rfc3339()).unwrap_or_else(|| "-".into());
    outln!("job        {}", status.job_id);
    outln!(
        "type       {} (queue {}, priority {})",
        visible(&status.job_type),
        visible(&status.queue),
        status.priority
    );
    if let Some(tenant) = &status.tenant {
        outln!("tenant     {}", visible(tenant));
    }
    outln!(
        "state      {}{}",
        status.state,
        if status.archived { " (archived)" } else { "" }
    );
    outln!(
        "attempts   {} of {}",
        status.attempt_count,
        status.max_attempts
    );
    if status.state.is_claimable() {
        outln!("next run   {}", status.run_after.to_rfc3339());
    }
    if let Some(owner) = &status.lease_owner {
        // A lease past its expiry still names its owner until a sweeper
        // sets the job back (docs/operations.md, JobwireLeasesNotSwept).
        let lapsed = match status.lease_expires_at {
            Some(at) if at <= now => format!(
                " (expired {} s ago, not swept yet)",
                (now - at).num_seconds()
            ),
            _ => String::new(),
        };
        outln!(
            "lease      {}, generation {}, expires {}{lapsed}",
            visible(owner),
            status.lease_generation,
            time(status.lease_expires_at)
        );
        outln!("heartbeat  {}", time(status.heartbeat_at));
    }
    if let Some(code) = &status.last_error_code {
        outln!(
            "last error {}: {}",
            visible(code),
            visible(status.last_error.as_deref().unwrap_or(""))
        );
    }
    if let (Some(schedule), Some(nominal)) = (&status.schedule_name, status.scheduled_for) {
        outln!(
            "schedule   {}, occurrence {}",
            visible(schedule),
            nominal.to_rfc3339()
        );
    }
    outln!("created    {}", status.created_at.to_rfc3339());
    outln!("finished   {}", time(status.finished_at));
    // serde_json escapes the C0 controls but not DEL or C1 (U+009B is a CSI).
    outln!("payload    {}", visible(&status.payload.to_string()));
}
