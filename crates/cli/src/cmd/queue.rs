//! `jobwire queue`: a queue's enqueue limits — the most jobs that may wait
//! on it, and shedding less urgent work from a depth on (docs/tenants.md,
//! "Enqueue limits"); listing, pausing and resuming queues is in
//! `queue_state.rs`.

use anyhow::{Result, bail};
use jobwire_core::Shedding;
use sqlx::PgPool;

use super::tenant::{LimitArg, count_limit};

#[derive(clap::Subcommand)]
pub(crate) enum QueueCommand {
    /// Set a queue's enqueue limits. Only the limits given change; `none`
    /// removes one, --remove all of them. Over a limit an enqueue is
    /// refused (queue full) and nothing is written.
    Limit {
        /// The queue.
        queue: String,
        /// Most jobs waiting on the queue (at least 1, or none).
        #[arg(long, value_name = "N|none", value_parser = count_limit)]
        max_queued: Option<LimitArg<u32>>,
        /// From this many waiting jobs on, refuse jobs less urgent than
        /// --shed-priority (at least 1, or none).
        #[arg(long, value_name = "N|none", value_parser = count_limit)]
        shed_depth: Option<LimitArg<u32>>,
        /// The least urgent priority still taken at the shedding depth (lower
        /// numbers are more urgent). Default with --shed-depth: 0.
        #[arg(long)]
        shed_priority: Option<i16>,
        /// Remove every limit of the queue instead.
        #[arg(long, conflicts_with_all = ["max_queued", "shed_depth", "shed_priority"])]
        remove: bool,
    },
    /// List every queue (declared, or holding jobs): dispatch, paused, jobs
    /// by state, the oldest waiting job's age.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Pause a queue: no job of it is claimed, on either path, until it is
    /// resumed. Enqueues go on.
    Pause {
        /// The queue.
        queue: String,
    },
    /// Resume a paused queue and wake its waiting jobs at once.
    Resume {
        /// The queue.
        queue: String,
    },
    /// Show a queue's enqueue limits and per-tenant defaults.
    Limits {
        /// The queue.
        queue: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) async fn queue(pool: &PgPool, command: QueueCommand) -> Result<()> {
    match command {
        QueueCommand::List { json } => super::queue_state::list(pool, json).await?,
        QueueCommand::Pause { queue } => super::queue_state::set_paused(pool, &queue, true).await?,
        QueueCommand::Resume { queue } => {
            super::queue_state::set_paused(pool, &queue, false).await?
        }
        QueueCommand::Limit {
            queue,
            max_queued,
            shed_depth,
            shed_priority,
            remove,
        } => {
            if !remove && max_queued.is_none() && shed_depth.is_none() && shed_priority.is_none() {
                bail!(
                    "give a limit to set (--max-queued, --shed-depth, --shed-priority) or --remove"
                );
            }
            let mut limits = jobwire_core::queue_limits(pool, &queue).await?;
            if remove {
                limits.max_queued = None;
                limits.shed = None;
            }
            if let Some(change) = max_queued {
                change.apply(&mut limits.max_queued);
            }
            match shed_depth {
                Some(LimitArg::Remove) => {
                    if shed_priority.is_some() {
                        bail!("--shed-priority needs a --shed-depth, not none");
                    }
                    limits.shed = None;
                }
                Some(LimitArg::Set(depth)) => {
                    let priority = shed_priority
                        .or(limits.shed.map(|shed| shed.priority))
                        .unwrap_or(0);
                    limits.shed = Some(Shedding { depth, priority });
                }
                None => {
                    if let Some(priority) = shed_priority {
                        match &mut limits.shed {
                            Some(shed) => shed.priority = priority,
                            None => bail!("--shed-priority needs a --shed-depth"),
                        }
                    }
                }
            }
            // Known or not before the limits declare it.
            let known = jobwire_core::queue_is_known(pool, &queue).await?;
            jobwire_core::set_queue_limits(pool, &queue, &limits).await?;
            print_limits(&queue, &limits);
            if !known {
                super::queue_state::note_unknown(&queue);
            }
        }
        QueueCommand::Limits { queue, json } => {
            let limits = jobwire_core::queue_limits(pool, &queue).await?;
            super::queue_state::note_if_unknown(pool, &queue).await?;
            if json {
                /// The queue's name beside its limits, as `tenant list --json` has it.
                #[derive(serde::Serialize)]
                struct Named<'a> {
                    queue: &'a str,
                    #[serde(flatten)]
                    limits: &'a jobwire_core::QueueLimits,
                }
                let named = Named {
                    queue: &queue,
                    limits: &limits,
                };
                outln!("{}", crate::output::json_pretty(&named)?);
            } else {
                print_limits(&queue, &limits);
            }
        }
    }
    Ok(())
}

fn print_limits(queue: &str, limits: &jobwire_core::QueueLimits) {
    match limits.max_queued {
        Some(n) => outln!("queue {queue:?}: at most {n} job(s) waiting"),
        None => outln!("queue {queue:?}: no cap on waiting jobs"),
    }
    match limits.shed {
        Some(shed) => outln!(
            "queue {queue:?}: from {} waiting job(s) on, only jobs of priority {} or more urgent get in",
            shed.depth,
            shed.priority
        ),
        None => outln!("queue {queue:?}: sheds nothing"),
    }
    let defaults = &limits.tenant_defaults;
    if !defaults.is_empty() {
        outln!("queue {queue:?}: per-tenant limits: see `jobwire tenant list {queue}`");
    }
}
