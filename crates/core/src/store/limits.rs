//! Enqueue limits: how many jobs may wait on a queue and per tenant, how
//! fast a tenant may enqueue, and shedding low-priority work from a deep
//! queue. Set and read here; enforced by the database's enqueue trigger
//! (migration `20261201000010_enqueue_limits.sql`), so the Rust enqueue,
//! `jobwire_enqueue` in SQL and the HTTP API refuse alike, with
//! [`Error::QueueFull`] or [`Error::RateLimited`], and write nothing.

use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use super::tenants::{argument, validate_tenant};
use crate::{Error, Result};

/// The longest window of a tenant's enqueue rate: a day.
pub const MAX_RATE_SECONDS: u32 = 24 * 60 * 60;

/// The largest count any limit takes (jobs waiting, running, per window):
/// far beyond any real limit, and far enough below `i32::MAX` that the
/// database's arithmetic on it never overflows.
pub const MAX_LIMIT: u32 = 1_000_000_000;

/// An enqueue rate: at most `jobs` per `per_seconds`, over a sliding window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueueRate {
    /// Jobs allowed per window (at least 1).
    pub jobs: u32,
    /// The window, in seconds (1 to a day).
    pub per_seconds: u32,
}

impl std::fmt::Display for EnqueueRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The largest unit the window is a whole number of, as it was
        // written: 300 s is `5min`, not `300s`.
        let (count, unit) = [(86_400, "d"), (3600, "h"), (60, "min"), (1, "s")]
            .into_iter()
            .find(|(unit_seconds, _)| self.per_seconds.is_multiple_of(*unit_seconds))
            .map(|(unit_seconds, unit)| (self.per_seconds / unit_seconds, unit))
            .unwrap_or((self.per_seconds, "s"));
        match count {
            1 => write!(f, "{}/{unit}", self.jobs),
            count => write!(f, "{}/{count}{unit}", self.jobs),
        }
    }
}

impl std::str::FromStr for EnqueueRate {
    type Err = String;

    /// `100/s`, `600/min`, `1000/h`, `20000/d`, or a window with a count:
    /// `50/10s`, `300/5min`, `900/6h`.
    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        let (jobs, window) = text.split_once('/').ok_or_else(|| {
            format!("{text:?} is not a rate like 100/s, 600/min, 1000/h, 20000/d or 50/10s")
        })?;
        let jobs: u32 = jobs
            .trim()
            .parse()
            .map_err(|err: std::num::ParseIntError| {
                match err.kind() {
                    // Past u32, so far past the bound checked below: said as it.
                    std::num::IntErrorKind::PosOverflow => format!("at most {MAX_LIMIT} jobs"),
                    _ => format!("{jobs:?} is not a whole number of jobs"),
                }
            })?;
        let window = window.trim();
        let not_a_window = || format!("{window:?} is not a window like s, min, h, d or 10s");
        let (count, unit) =
            window.split_at(window.find(|c: char| !c.is_ascii_digit()).unwrap_or(0));
        let count: u32 = match count {
            "" => 1,
            digits => digits.parse().map_err(|_| not_a_window())?,
        };
        let unit_seconds: u32 = match unit {
            "s" | "sec" => 1,
            "m" | "min" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(not_a_window()),
        };
        // An overflow is a window far past a day: refused by the check below.
        let per_seconds = count.saturating_mul(unit_seconds);
        let rate = EnqueueRate { jobs, per_seconds };
        // The reason alone: on a command line or in a form the argument's
        // internal name ("enqueue_rate.per_seconds") means nothing.
        rate.check().map_err(|error| match error {
            Error::InvalidArgument { reason, .. } => reason,
            other => other.to_string(),
        })?;
        Ok(rate)
    }
}

impl EnqueueRate {
    fn check(&self) -> Result<()> {
        if self.jobs == 0 {
            return Err(invalid(
                "enqueue_rate.jobs",
                "must allow at least 1 job".into(),
            ));
        }
        if self.jobs > MAX_LIMIT {
            return Err(invalid(
                "enqueue_rate.jobs",
                format!("at most {MAX_LIMIT} jobs"),
            ));
        }
        if !(1..=MAX_RATE_SECONDS).contains(&self.per_seconds) {
            return Err(invalid(
                "enqueue_rate.per_seconds",
                format!("the window must be 1 to {MAX_RATE_SECONDS} seconds"),
            ));
        }
        Ok(())
    }
}

/// The per-tenant limits at one scope: a queue's defaults for every tenant,
/// or one tenant's overrides. `None` is no limit (an override's `None`
/// falls back to the default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantLimits {
    /// Most of the tenant's jobs running at once.
    pub max_running: Option<u32>,
    /// Most of the tenant's jobs waiting (queued or waiting for a retry).
    pub max_queued: Option<u32>,
    /// How fast the tenant may enqueue.
    pub enqueue_rate: Option<EnqueueRate>,
}

impl TenantLimits {
    pub(crate) fn from_columns(
        max_running: Option<i32>,
        max_queued: Option<i32>,
        rate_jobs: Option<i32>,
        rate_seconds: Option<i32>,
    ) -> Self {
        let positive = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok());
        TenantLimits {
            max_running: positive(max_running),
            max_queued: positive(max_queued),
            enqueue_rate: positive(rate_jobs)
                .zip(positive(rate_seconds))
                .map(|(jobs, per_seconds)| EnqueueRate { jobs, per_seconds }),
        }
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == TenantLimits::default()
    }
}

/// Shedding: an enqueue holding a job less urgent than `priority` (a
/// higher number) is taken only while the queue, with the enqueue's own
/// jobs, holds at most `depth` waiting jobs; once `depth` wait, only jobs
/// of `priority` or more urgent are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shedding {
    /// Waiting jobs from which less urgent enqueues are refused.
    pub depth: u32,
    /// The least urgent priority still taken at that depth.
    pub priority: i16,
}

/// A queue's enqueue limits, and the per-tenant defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueLimits {
    /// Most jobs waiting on the queue (queued or waiting for a retry).
    pub max_queued: Option<u32>,
    /// Refusing less urgent jobs from a depth on.
    pub shed: Option<Shedding>,
    /// The limits of every tenant without an override.
    #[serde(skip_deserializing)]
    pub tenant_defaults: TenantLimits,
}

fn invalid(argument: &'static str, reason: String) -> Error {
    Error::InvalidArgument { argument, reason }
}

fn positive_i32(argument: &'static str, value: Option<u32>) -> Result<Option<i32>> {
    match value {
        Some(0) => Err(invalid(
            argument,
            "must be at least 1 (remove the limit instead)".into(),
        )),
        Some(n) if n > MAX_LIMIT => Err(invalid(argument, format!("at most {MAX_LIMIT}"))),
        Some(n) => Ok(Some(n as i32)),
        None => Ok(None),
    }
}

/// Set `queue`'s own enqueue limits (the cap on waiting jobs and
/// shedding), replacing the ones it had; the per-tenant defaults in
/// `limits` are not touched (see [`set_tenant_limits`]). Takes effect at the
/// next enqueue; jobs already waiting stay. A shedding depth must be below
/// `max_queued`: at or above it the queue is full first, and shedding would
/// never refuse anything.
pub async fn set_queue_limits(pool: &PgPool, queue: &str, limits: &QueueLimits) -> Result<()> {
    argument("queue", queue)?;
    let max_queued = positive_i32("max_queued", limits.max_queued)?;
    let depth = limits.shed.map(|shed| shed.depth);
    let shed_depth = positive_i32("shed_depth", depth)?;
    if let (Some(max), Some(depth)) = (limits.max_queued, depth)
        && depth >= max
    {
        return Err(invalid(
            "shed_depth",
            format!(
                "{depth} is not below the queue's cap on waiting jobs ({max}): the queue would be full before it shed anything"
            ),
        ));
    }
    let mut tx = pool.begin().await?;
    sqlx::query(include_str!("../../sql/set_queue_limits.sql"))
        .bind(queue)
        .bind(max_queued)
        .bind(shed_depth)
        .bind(limits.shed.map(|shed| shed.priority))
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT jobwire_refresh_enqueue_limited($1)")
        .bind(queue)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Set the per-tenant limits of `queue`, all three at once: `tenant =
/// None` sets the defaults of every tenant, `Some(t)` the overrides of `t`
/// (an override with no limit left is removed). Takes effect within a
/// second for the running cap, and wakes what a raised or removed one
/// frees (see [`set_tenant_cap`]); at the next enqueue for the others.
///
/// [`set_tenant_cap`]: crate::set_tenant_cap
pub async fn set_tenant_limits(
    pool: &PgPool,
    queue: &str,
    tenant: Option<&str>,
    limits: &TenantLimits,
) -> Result<()> {
    write_tenant_limits(pool, queue, tenant, limits, false).await
}

/// [`set_tenant_limits`], or with `running_only` just the running cap.
/// A running cap raised, or removed with none left in force, wakes what it
/// freed once it has committed, in a statement of its own: broker
/// wake-ups, or a NOTIFY on the PostgreSQL path. One lowered takes back, in
/// the same way, the slots above it handed to jobs not yet started.
pub(super) async fn write_tenant_limits(
    pool: &PgPool,
    queue: &str,
    tenant: Option<&str>,
    limits: &TenantLimits,
    running_only: bool,
) -> Result<()> {
    argument("queue", queue)?;
    if let Some(tenant) = tenant {
        validate_tenant(tenant)?;
    }
    let max_running = positive_i32("max_running", limits.max_running)?;
    let max_queued = positive_i32("max_queued", limits.max_queued)?;
    if let Some(rate) = &limits.enqueue_rate {
        rate.check()?;
    }
    let rate_jobs = limits.enqueue_rate.map(|rate| rate.jobs as i32);
    let rate_seconds = limits.enqueue_rate.map(|rate| rate.per_seconds as i32);
    let mut tx = pool.begin().await?;
    // Changes of one queue's tenant limits take turns from here, so that
    // each reads the cap it replaces: the same removal made twice at once
    // would otherwise wake the jobs it frees twice, and a change racing
    // another could take a raise for a cut and wake nothing. (The wakes run
    // after each commit and are not ordered: two different removals that
    // free the same tenant can still both wake it, which costs a duplicate
    // wake-up, nothing more.) The row is made first, since a lock takes
    // nothing on a missing row. Safe from deadlock: the upsert below took
    // this same lock before, only later; the transaction takes no job or
    // hand-out lock; and whoever waits for it holds at most job locks (the
    // reconciler's release of handed slots).
    sqlx::query("INSERT INTO job_queues (queue) VALUES ($1) ON CONFLICT (queue) DO NOTHING")
        .bind(queue)
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT 1 FROM job_queues WHERE queue = $1 FOR NO KEY UPDATE")
        .bind(queue)
        .execute(&mut *tx)
        .await?;
    let cap_before = cap_in_force(&mut tx, queue, tenant).await?;
    sqlx::query(include_str!("../../sql/set_tenant_limits.sql"))
        .bind(queue)
        .bind(tenant)
        .bind(running_only)
        .bind(max_running)
        .bind(max_queued)
        .bind(rate_jobs)
        .bind(rate_seconds)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "DELETE FROM job_tenants WHERE queue = $1 AND tenant = $2
           AND max_running IS NULL AND max_queued IS NULL AND rate_jobs IS NULL",
    )
    .bind(queue)
    .bind(tenant)
    .execute(&mut *tx)
    .await?;
    sqlx::query("SELECT jobwire_refresh_tenant_capped($1), jobwire_refresh_enqueue_limited($1)")
        .bind(queue)
        .execute(&mut *tx)
        .await?;
    let cap_after = cap_in_force(&mut tx, queue, tenant).await?;
    tx.commit().await?;
    match (cap_before, cap_after) {
        (Some(_), None) => wake_what_it_freed(pool, queue, tenant, true).await,
        (Some(before), Some(after)) if after > before => {
            wake_what_it_freed(pool, queue, tenant, false).await
        }
        (Some(before), Some(after)) if after < before => {
            take_back_slots_over_the_cap(pool, queue, tenant).await
        }
        // Set where there was none, or unchanged: nothing freed, nothing
        // handed over it.
        _ => {}
    }
    Ok(())
}

/// After a committed raise or removal of a cap, in a statement of its own:
/// wake the jobs it freed (`uncapped`: the change left tenants with no cap).
/// The change itself has committed: a failure here is the caller's to hear
/// of only in the log, and the reconciler wakes the jobs later.
async fn wake_what_it_freed(pool: &PgPool, queue: &str, tenant: Option<&str>, uncapped: bool) {
    // Not prepared for reuse: a generic plan could not use the tenant to
    // find one tenant's jobs.
    let woken: std::result::Result<Option<i64>, sqlx::Error> =
        sqlx::query_scalar(include_str!("../../sql/wake_after_cap_change.sql"))
            .bind(queue)
            .bind(tenant)
            .bind(uncapped)
            .persistent(false)
            .fetch_optional(pool)
            .await;
    match woken {
        Ok(woken) => tracing::debug!(queue, ?tenant, ?woken, "a cap change woke what it freed"),
        Err(err) => tracing::warn!(
            queue,
            ?tenant,
            error = %err,
            "a cap change committed, but waking the jobs it freed failed; the reconciler wakes them"
        ),
    }
}

/// After a committed cut of a cap, in a statement of its own: on a broker
/// queue, the slots above the new cap that were handed to waiting jobs
/// (their wake-up on its way) are taken back, so that those jobs do not
/// start over the cap; their wake-ups find no slot and miss, and the jobs
/// wait for the next freed slot as the others do. A failure leaves them to
/// start over the cap, as jobs already running do; it is logged.
async fn take_back_slots_over_the_cap(pool: &PgPool, queue: &str, tenant: Option<&str>) {
    let taken: std::result::Result<i64, sqlx::Error> =
        sqlx::query_scalar(include_str!("../../sql/take_back_slots_over_the_cap.sql"))
            .bind(queue)
            .bind(tenant)
            .persistent(false)
            .fetch_one(pool)
            .await;
    match taken {
        Ok(taken) => tracing::debug!(
            queue,
            ?tenant,
            taken,
            "a lowered cap took back handed slots"
        ),
        Err(err) => tracing::warn!(
            queue,
            ?tenant,
            error = %err,
            "a cap was lowered, but taking back the slots handed over it failed; jobs given them may start over the new cap"
        ),
    }
}

/// The cap on running jobs the change is about: `tenant`'s in force (its
/// own, else the queue's default), or with `None` the queue's default.
async fn cap_in_force(
    conn: &mut sqlx::PgConnection,
    queue: &str,
    tenant: Option<&str>,
) -> Result<Option<i32>> {
    let cap = match tenant {
        Some(tenant) => {
            sqlx::query_scalar("SELECT jobwire_tenant_cap($1, $2)")
                .bind(queue)
                .bind(tenant)
                .fetch_one(conn)
                .await?
        }
        // The row is there: write_tenant_limits makes it first.
        None => {
            sqlx::query_scalar("SELECT tenant_max_running FROM job_queues WHERE queue = $1")
                .bind(queue)
                .fetch_one(conn)
                .await?
        }
    };
    Ok(cap)
}

#[derive(sqlx::FromRow)]
struct QueueLimitsRow {
    max_queued: Option<i32>,
    shed_depth: Option<i32>,
    shed_priority: Option<i16>,
    tenant_max_running: Option<i32>,
    tenant_max_queued: Option<i32>,
    tenant_rate_jobs: Option<i32>,
    tenant_rate_seconds: Option<i32>,
}

/// `queue`'s enqueue limits and per-tenant defaults (all `None` for a
/// queue nobody configured).
pub async fn queue_limits(pool: &PgPool, queue: &str) -> Result<QueueLimits> {
    argument("queue", queue)?;
    let row: Option<QueueLimitsRow> = sqlx::query_as(include_str!("../../sql/queue_limits.sql"))
        .bind(queue)
        .fetch_optional(pool)
        .await?;
    let Some(row) = row else {
        return Ok(QueueLimits::default());
    };
    let positive = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok());
    Ok(QueueLimits {
        max_queued: positive(row.max_queued),
        shed: positive(row.shed_depth)
            .zip(row.shed_priority)
            .map(|(depth, priority)| Shedding { depth, priority }),
        tenant_defaults: TenantLimits::from_columns(
            row.tenant_max_running,
            row.tenant_max_queued,
            row.tenant_rate_jobs,
            row.tenant_rate_seconds,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print_alike() {
        for (text, jobs, per_seconds, shown) in [
            ("100/s", 100, 1, "100/s"),
            ("600/min", 600, 60, "600/min"),
            ("1000/h", 1000, 3600, "1000/h"),
            ("50/10s", 50, 10, "50/10s"),
            ("20000/d", 20000, 86_400, "20000/d"),
            ("300/5min", 300, 300, "300/5min"),
            ("900/6h", 900, 21_600, "900/6h"),
            ("90/90s", 90, 90, "90/90s"),
            ("7/120s", 7, 120, "7/2min"),
        ] {
            let rate: EnqueueRate = text.parse().unwrap();
            assert_eq!(rate, EnqueueRate { jobs, per_seconds });
            assert_eq!(rate.to_string(), shown);
        }
        for bad in [
            "",
            "100",
            "0/s",
            "x/s",
            "10/week",
            "10/0s",
            "10/90000s",
            "10/2d",
            "10/s5",
            "10/",
        ] {
            assert!(bad.parse::<EnqueueRate>().is_err(), "{bad:?} parsed");
        }
        // A count past what a rate may allow says so, whatever its size.
        let huge = "99999999999/s".parse::<EnqueueRate>().unwrap_err();
        assert_eq!(huge, format!("at most {MAX_LIMIT} jobs"));
        // Past a day says so, rather than "not a window".
        let too_long = "5/2d".parse::<EnqueueRate>().unwrap_err();
        assert!(too_long.contains("1 to 86400 seconds"), "{too_long}");
    }
}
