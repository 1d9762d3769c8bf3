//! `jobwire tenant`: per-queue limits for each tenant: how many of its jobs
//! run at once, how many may wait, how fast it may enqueue
//! (docs/tenants.md).

use crate::output::visible;
use anyhow::{Result, bail};
use jobwire_core::{EnqueueRate, MAX_LIMIT, TenantLimits};
use sqlx::PgPool;

/// A limit on the command line: a number, or `none` to remove it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LimitArg<T> {
    Set(T),
    Remove,
}

impl<T> LimitArg<T> {
    pub(crate) fn apply(self, current: &mut Option<T>) {
        *current = match self {
            LimitArg::Set(value) => Some(value),
            LimitArg::Remove => None,
        };
    }
}

pub(crate) fn count_limit(text: &str) -> Result<LimitArg<u32>, String> {
    if text == "none" {
        return Ok(LimitArg::Remove);
    }
    // Parsed wider than the limit so that `-1` or `0` reads as out of range,
    // not as "not a number".
    match text.parse::<i64>() {
        Ok(n) if n < 1 => Err("must be at least 1 (or none to remove the limit)".into()),
        Ok(n) if n > i64::from(MAX_LIMIT) => Err(format!("at most {MAX_LIMIT}")),
        Ok(n) => Ok(LimitArg::Set(n as u32)),
        Err(_) => Err(format!("{text:?} is not a whole number or none")),
    }
}

fn rate_limit(text: &str) -> Result<LimitArg<EnqueueRate>, String> {
    if text == "none" {
        return Ok(LimitArg::Remove);
    }
    text.parse().map(LimitArg::Set)
}

#[derive(clap::Subcommand)]
pub(crate) enum TenantCommand {
    /// Set a queue's per-tenant limits: the defaults of every tenant, or
    /// with --tenant the overrides of one. Only the limits given change;
    /// `none` removes one, --remove all of them.
    Set {
        /// The queue.
        queue: String,
        /// The tenant to override (default: every tenant of the queue).
        #[arg(long)]
        tenant: Option<String>,
        /// Most running jobs per tenant (at least 1, or none).
        #[arg(long, value_name = "N|none", value_parser = count_limit)]
        max_running: Option<LimitArg<u32>>,
        /// Most waiting jobs per tenant: an enqueue past it is refused
        /// (queue full), and nothing is written (at least 1, or none).
        #[arg(long, value_name = "N|none", value_parser = count_limit)]
        max_queued: Option<LimitArg<u32>>,
        /// How fast a tenant may enqueue, like 100/s, 600/min, 1000/h, 20000/d or
        /// 50/10s: an enqueue past it is refused (rate limited), or none.
        #[arg(long, value_name = "RATE|none", value_parser = rate_limit)]
        enqueue_rate: Option<LimitArg<EnqueueRate>>,
        /// Remove every limit at this scope instead (an override falls back
        /// to the defaults).
        #[arg(long, conflicts_with_all = ["max_running", "max_queued", "enqueue_rate"])]
        remove: bool,
    },
    /// Show a queue's per-tenant limits and each tenant's running and
    /// waiting jobs.
    List {
        /// The queue.
        queue: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// The limits of one scope, as `jobwire tenant list` prints them.
fn describe(limits: &TenantLimits) -> String {
    describe_marked(limits, &TenantLimits::default())
}

/// `limits` in words, each one the tenant set itself (`own`) marked so.
fn describe_marked(limits: &TenantLimits, own: &TenantLimits) -> String {
    let mark = |is_own: bool| if is_own { " (own)" } else { "" };
    let mut parts = Vec::new();
    if let Some(n) = limits.max_running {
        parts.push(format!(
            "at most {n} running{}",
            mark(own.max_running.is_some())
        ));
    }
    if let Some(n) = limits.max_queued {
        parts.push(format!(
            "at most {n} waiting{}",
            mark(own.max_queued.is_some())
        ));
    }
    if let Some(rate) = limits.enqueue_rate {
        parts.push(format!(
            "enqueues at most {rate}{}",
            mark(own.enqueue_rate.is_some())
        ));
    }
    if parts.is_empty() {
        "no limits".to_owned()
    } else {
        parts.join(", ")
    }
}

pub(crate) async fn tenant(pool: &PgPool, command: TenantCommand) -> Result<()> {
    match command {
        TenantCommand::Set {
            queue,
            tenant,
            max_running,
            max_queued,
            enqueue_rate,
            remove,
        } => {
            if !remove && max_running.is_none() && max_queued.is_none() && enqueue_rate.is_none() {
                bail!(
                    "give a limit to set (--max-running, --max-queued, --enqueue-rate) or --remove"
                );
            }
            let caps = jobwire_core::tenant_caps(pool, &queue).await?;
            let mut limits = match &tenant {
                None => caps.defaults,
                Some(name) => caps
                    .tenants
                    .iter()
                    .find(|known| known.tenant == *name)
                    .map(|known| known.overrides)
                    .unwrap_or_default(),
            };
            if remove {
                limits = TenantLimits::default();
            }
            if let Some(change) = max_running {
                change.apply(&mut limits.max_running);
            }
            if let Some(change) = max_queued {
                change.apply(&mut limits.max_queued);
            }
            if let Some(change) = enqueue_rate {
                change.apply(&mut limits.enqueue_rate);
            }
            let known = jobwire_core::queue_is_known(pool, &queue).await?;
            jobwire_core::set_tenant_limits(pool, &queue, tenant.as_deref(), &limits).await?;
            if !known {
                super::queue_state::note_unknown(&queue);
            }
            let whom = match &tenant {
                Some(tenant) => format!("tenant {tenant:?}"),
                None => "every tenant".to_owned(),
            };
            // Say what this command changed, one line per limit. A removed
            // override falls back to the default; a removed default leaves
            // the tenants without overrides unlimited.
            let removed = |what: &str| match &tenant {
                Some(tenant) => format!(
                    "queue {queue:?}: tenant {tenant:?} has no {what} of its own now (the queue's default applies)"
                ),
                None => format!("queue {queue:?}: no default {what} for its tenants now"),
            };
            if remove || max_running.is_some() {
                match limits.max_running {
                    Some(n) => outln!("queue {queue:?}: {whom} runs at most {n} job(s) at once"),
                    None => outln!("{}", removed("cap on running jobs")),
                }
            }
            if remove || max_queued.is_some() {
                match limits.max_queued {
                    Some(n) => outln!("queue {queue:?}: {whom} has at most {n} job(s) waiting"),
                    None => outln!("{}", removed("cap on waiting jobs")),
                }
            }
            if remove || enqueue_rate.is_some() {
                match limits.enqueue_rate {
                    Some(rate) => outln!("queue {queue:?}: {whom} enqueues at most {rate}"),
                    None => outln!("{}", removed("enqueue rate")),
                }
            }
        }
        TenantCommand::List { queue, json } => {
            let caps = jobwire_core::tenant_caps(pool, &queue).await?;
            super::queue_state::note_if_unknown(pool, &queue).await?;
            if json {
                outln!("{}", crate::output::json_pretty(&caps)?);
                return Ok(());
            }
            outln!(
                "queue {queue:?} defaults for every tenant: {}",
                describe(&caps.defaults)
            );
            if caps.tenants.is_empty() {
                outln!(
                    "no tenant has an override or has run under a cap since the last sweep of idle tenants"
                );
                return Ok(());
            }
            // One column for every limit in force, marking the tenant's own
            // (an override of any of the three, not only of the cap).
            // Starting: waiting jobs handed a freed slot, their wake-up on
            // its way (broker queues); they hold the slot, and count among
            // the waiting.
            outln!(
                "{:<32} {:>8} {:>8} {:>8} {:>8}  limits in force ((own): the tenant's override)",
                "tenant",
                "cap",
                "running",
                "starting",
                "waiting"
            );
            let show = |n: Option<i32>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
            for tenant in caps.tenants {
                outln!(
                    "{:<32} {:>8} {:>8} {:>8} {:>8}  {}",
                    visible(&tenant.tenant),
                    show(tenant.max_running),
                    tenant.running,
                    tenant.starting,
                    tenant.waiting,
                    describe_marked(&tenant.limits, &tenant.overrides)
                );
            }
        }
    }
    Ok(())
}
