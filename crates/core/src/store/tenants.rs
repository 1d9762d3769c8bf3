//! Tenants: per-queue caps on how many of one tenant's jobs run at once,
//! and reading a queue's per-tenant limits (the enqueue limits are set in
//! `limits.rs`).
//!
//! The cap itself is enforced by the database (migration
//! `20261201000009_tenant_caps.sql`): slot rows that a claim takes in the
//! claim statement and a trigger frees on every way out of RUNNING. These
//! functions set and read the caps, hand free slots to waiting jobs and
//! forget the slot rows of idle tenants (migration
//! `20261206000002_idle_tenants_slot_rows_are_forgotten.sql`).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use super::limits::TenantLimits;
use crate::{Error, Result};

/// The per-tenant limits of one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantCaps {
    /// The queue.
    pub queue: String,
    /// The cap on running jobs of every tenant without an override
    /// (`None`: uncapped).
    pub default_max_running: Option<i32>,
    /// The defaults of every tenant without an override, all three limits.
    pub defaults: TenantLimits,
    /// Tenants with an override, or with slot rows: capped tenants that
    /// held or waited for a slot since the last sweep of idle tenants.
    pub tenants: Vec<TenantCap>,
}

/// One tenant of a queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantCap {
    /// The tenant.
    pub tenant: String,
    /// Its own cap on running jobs, when it has one.
    pub override_max_running: Option<i32>,
    /// The cap in force: the override, else the queue's default.
    pub max_running: Option<i32>,
    /// Its own limits (`None` fields fall back to the queue's defaults).
    pub overrides: TenantLimits,
    /// The limits in force.
    pub limits: TenantLimits,
    /// Its jobs running now under the cap (holding a slot).
    pub running: i64,
    /// Its waiting jobs handed a freed slot, their wake-up on its way (on
    /// broker queues): they hold the slot until they start, so the tenant
    /// is at its cap when `running + starting` reaches it.
    pub starting: i64,
    /// Its jobs waiting (queued or waiting for a retry), the starting ones
    /// among them.
    pub waiting: i64,
}

#[derive(sqlx::FromRow)]
struct TenantCapRow {
    tenant: String,
    override_max_running: Option<i32>,
    max_running: Option<i32>,
    override_max_queued: Option<i32>,
    max_queued: Option<i32>,
    override_rate_jobs: Option<i32>,
    override_rate_seconds: Option<i32>,
    rate_jobs: Option<i32>,
    rate_seconds: Option<i32>,
    running: i64,
    starting: i64,
    waiting: i64,
}

impl From<TenantCapRow> for TenantCap {
    fn from(row: TenantCapRow) -> Self {
        TenantCap {
            tenant: row.tenant,
            override_max_running: row.override_max_running,
            max_running: row.max_running,
            overrides: TenantLimits::from_columns(
                row.override_max_running,
                row.override_max_queued,
                row.override_rate_jobs,
                row.override_rate_seconds,
            ),
            limits: TenantLimits::from_columns(
                row.max_running,
                row.max_queued,
                row.rate_jobs,
                row.rate_seconds,
            ),
            running: row.running,
            starting: row.starting,
            waiting: row.waiting,
        }
    }
}

/// Check a tenant name as the enqueue does: not blank, at most 255 bytes.
pub fn validate_tenant(tenant: &str) -> Result<()> {
    argument("tenant", tenant)
}

pub(super) fn argument(argument: &'static str, value: &str) -> Result<()> {
    match super::enqueue::name_problem(value) {
        Some(reason) => Err(Error::InvalidArgument { argument, reason }),
        None => Ok(()),
    }
}

/// Cap how many jobs of one tenant of `queue` run at once: `tenant = None`
/// sets the queue's default for every tenant, `Some(t)` overrides it for
/// `t`. `max_running = None` removes that cap (a removed override falls
/// back to the default). Claims follow it within a second. A cap holds by
/// its slots' numbers: after a cut, jobs already running in slots above it
/// finish and their slots are not taken again, while slots at or below it
/// are, as they free; on a broker queue, jobs handed a slot above it give
/// that slot back once the change has committed. A cap raised, or removed
/// with no cap left in force, wakes the jobs it frees as soon as it has
/// committed
/// (wake_after_cap_change.sql): on a broker queue the tenants' waiting jobs
/// get their wake-ups then, not at the reconciler's next pass, and a
/// PostgreSQL-path queue's workers are notified. (If that wake fails, the
/// change stands, a warning is logged and the reconciler wakes them.)
pub async fn set_tenant_cap(
    pool: &PgPool,
    queue: &str,
    tenant: Option<&str>,
    max_running: Option<u32>,
) -> Result<()> {
    argument("queue", queue)?;
    if let Some(tenant) = tenant {
        validate_tenant(tenant)?;
    }
    let limits = TenantLimits {
        max_running,
        ..TenantLimits::default()
    };
    super::limits::write_tenant_limits(pool, queue, tenant, &limits, true).await
}

/// The per-tenant limits of `queue` and its tenants' running and waiting
/// jobs.
pub async fn tenant_caps(pool: &PgPool, queue: &str) -> Result<TenantCaps> {
    let limits = super::limits::queue_limits(pool, queue).await?;
    let rows: Vec<TenantCapRow> = sqlx::query_as(include_str!("../../sql/tenant_caps.sql"))
        .bind(queue)
        .fetch_all(pool)
        .await?;
    Ok(TenantCaps {
        queue: queue.to_owned(),
        default_max_running: limits
            .tenant_defaults
            .max_running
            .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
        defaults: limits.tenant_defaults,
        tenants: rows.into_iter().map(Into::into).collect(),
    })
}

/// The queues with a per-tenant limit (a default, an override, or slot rows
/// left from a cap), by name: the ones [`tenant_caps`] has something to say
/// about.
pub async fn queues_with_tenant_limits(pool: &PgPool) -> Result<Vec<String>> {
    Ok(
        sqlx::query_scalar(include_str!("../../sql/queues_with_tenant_limits.sql"))
            .fetch_all(pool)
            .await?,
    )
}

/// Hand the free slots of every capped tenant with a due job that holds no
/// slot, on broker queues not paused, to its next due jobs, with wake-ups
/// (the reconciler's pass: slots normally hand themselves on when a job
/// finishes). A tenant without slot rows (forgotten as idle) gets them
/// first. Returns how many jobs were woken.
pub async fn hand_out_free_tenant_slots<'c, E: sqlx::PgExecutor<'c>>(executor: E) -> Result<u64> {
    let handed: i32 = sqlx::query_scalar(include_str!("../../sql/hand_out_free_tenant_slots.sql"))
        .fetch_one(executor)
        .await?;
    Ok(u64::try_from(handed).unwrap_or(0))
}

/// Give back the tenant slots held by waiting jobs of every queue on the
/// PostgreSQL path, whose claim never takes such a job (a broker hand-over
/// that landed after its queue was moved to that path); the reconciler's
/// pass. Returns how many slots were given back.
pub async fn release_handed_slots<'c, E: sqlx::PgExecutor<'c>>(executor: E) -> Result<u64> {
    let released: i32 = sqlx::query_scalar(include_str!("../../sql/release_handed_slots.sql"))
        .fetch_one(executor)
        .await?;
    Ok(u64::try_from(released).unwrap_or(0))
}

/// Tenants whose slot rows are deleted in one transaction of the sweep:
/// claims of the queue wait while it runs, so it stays short.
const FORGET_TENANTS_PER_STATEMENT: usize = 25;

/// Delete the slot rows of every tenant that holds no slot and has no
/// waiting job (the reconciler's sweep); they come back the next time the
/// tenant needs a slot. Returns how many tenants were forgotten. A queue
/// whose slot lock stays held for 50 ms (a transaction that created or
/// found a tenant's slot rows has not ended) is left for a later sweep.
pub async fn forget_idle_tenant_slots(pool: &PgPool) -> Result<u64> {
    let idle: Vec<(String, String)> = sqlx::query_as(include_str!("../../sql/idle_tenants.sql"))
        .fetch_all(pool)
        .await?;
    let mut forgotten = 0;
    // The list comes ordered by queue: one group per queue.
    for group in idle.chunk_by(|a, b| a.0 == b.0) {
        let queue = &group[0].0;
        let tenants: Vec<&str> = group.iter().map(|(_, tenant)| tenant.as_str()).collect();
        for some in tenants.chunks(FORGET_TENANTS_PER_STATEMENT) {
            let n: i32 = sqlx::query_scalar("SELECT jobwire_forget_idle_tenant_slots($1, $2)")
                .bind(queue)
                .bind(some)
                .fetch_one(pool)
                .await?;
            // -1: the queue's lock stayed busy. Each further try would hold
            // the queue's claims up again for as long, so leave the queue
            // to the next sweep.
            let Ok(n) = u64::try_from(n) else {
                break;
            };
            forgotten += n;
        }
    }
    Ok(forgotten)
}

/// How long a claimer of this process trusts what it last learned of a
/// queue's caps: a capped queue goes straight to the capped claim, an
/// uncapped one's empty claim asks nothing more. A cap set or removed is
/// noticed within this; until then the plain claim takes nothing from a
/// newly capped queue, and the capped claim claims an uncapped one
/// correctly.
const CAPPED_MEMORY: Duration = Duration::from_secs(1);

/// Whether each queue was capped when this process last asked, and when.
static CAPPED_QUEUES: LazyLock<Mutex<HashMap<String, (bool, Instant)>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Whether `queue` is capped, as learned less than [`CAPPED_MEMORY`] ago.
pub(crate) fn known_capped(queue: &str) -> Option<bool> {
    let queues = CAPPED_QUEUES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    queues
        .get(queue)
        .filter(|(_, asked)| asked.elapsed() < CAPPED_MEMORY)
        .map(|(capped, _)| *capped)
}

/// Whether `queue` is capped: remembered, or asked of the database (and
/// remembered).
pub(crate) async fn is_capped(conn: &mut PgConnection, queue: &str) -> Result<bool> {
    if let Some(capped) = known_capped(queue) {
        return Ok(capped);
    }
    let capped = sqlx::query_scalar("SELECT tenant_capped FROM job_queues WHERE queue = $1")
        .bind(queue)
        .fetch_optional(conn)
        .await?
        .unwrap_or(false);
    CAPPED_QUEUES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(queue.to_owned(), (capped, Instant::now()));
    Ok(capped)
}
