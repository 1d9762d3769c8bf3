//! `jobwire schedule`: recurring schedules, created, listed, paused,
//! resumed and removed. The schedulers inside `jobwire worker` / `run` fire them.

use crate::output::visible;
use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use jobwire_core::{MissedRuns, Schedule, ScheduleSpec};

use super::enqueue::JobFields;
use sqlx::PgPool;

#[derive(clap::Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Create or replace a schedule.
    Put(PutArgs),
    /// List schedules with their next three fire times (zone and UTC).
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show one schedule.
    Show {
        /// The schedule.
        name: String,
    },
    /// Stop firing a schedule (until resumed).
    Pause {
        /// The schedule.
        name: String,
    },
    /// Fire a paused schedule again, from its next occurrence.
    Resume {
        /// The schedule.
        name: String,
    },
    /// Remove a schedule (the jobs it created stay).
    Rm {
        /// The schedule.
        name: String,
    },
}

#[derive(clap::Args)]
pub(crate) struct PutArgs {
    /// The schedule's name.
    name: String,
    /// Cron expression: 5 fields (minute hour day month weekday), 6 with
    /// seconds first, or @hourly, @daily, @weekly, @monthly, @yearly.
    #[arg(long)]
    cron: String,
    /// IANA time zone (Asia/Kolkata, America/New_York, ...) or UTC.
    #[arg(long, default_value = "UTC")]
    timezone: String,
    /// The job type each occurrence enqueues.
    #[arg(long = "type")]
    job_type: String,
    #[command(flatten)]
    job: JobFields,
    /// The tenant every occurrence's job works for (the queue's running cap
    /// for that tenant applies; enqueue limits do not refuse an occurrence).
    #[arg(long)]
    tenant: Option<String>,
    /// Spread each occurrence's start over this many seconds (at most 86400).
    #[arg(long, default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(jobwire_core::store::MAX_JITTER_SECONDS)))]
    jitter_seconds: u32,
    /// Occurrences missed while no scheduler ran: skip them, run the latest
    /// once, or run all (at most --max-catch-up).
    #[arg(long, default_value = "latest", value_parser = ["skip", "latest", "all"])]
    missed: String,
    /// Most missed occurrences `--missed all` enqueues at once (1 to 10000).
    #[arg(long, default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(jobwire_core::store::MAX_CATCH_UP)))]
    max_catch_up: u32,
}

pub(crate) async fn schedule(pool: &PgPool, command: ScheduleCommand) -> Result<()> {
    match command {
        ScheduleCommand::Put(args) => put(pool, args).await,
        ScheduleCommand::List { json } => {
            let schedules = jobwire_core::list_schedules(pool).await?;
            if json {
                let mut out = Vec::new();
                for schedule in &schedules {
                    let mut value = serde_json::to_value(schedule)?;
                    // One schedule that cannot be evaluated is shown with
                    // its problem, not made to hide the others.
                    value["next_occurrences"] =
                        serde_json::to_value(schedule.upcoming(3).unwrap_or_default())?;
                    if let Some(problem) = schedule.problem() {
                        value["problem"] = problem.into();
                    }
                    out.push(value);
                }
                outln!("{}", crate::output::json_pretty(&out)?);
                return Ok(());
            }
            if schedules.is_empty() {
                outln!("no schedules");
            }
            let now = jobwire_core::database_now(pool).await?;
            for schedule in &schedules {
                print_schedule(schedule, now)?;
                outln!();
            }
            Ok(())
        }
        ScheduleCommand::Show { name } => {
            let schedule = jobwire_core::get_schedule(pool, &name)
                .await?
                .with_context(|| format!("no schedule is called {name:?}"))?;
            print_schedule(&schedule, jobwire_core::database_now(pool).await?)
        }
        ScheduleCommand::Pause { name } => {
            if !jobwire_core::set_schedule_paused(pool, &name, true).await? {
                bail!("no schedule is called {name:?}");
            }
            outln!("schedule {name:?} paused");
            Ok(())
        }
        ScheduleCommand::Resume { name } => {
            if !jobwire_core::set_schedule_paused(pool, &name, false).await? {
                bail!("no schedule is called {name:?}");
            }
            outln!("schedule {name:?} resumed");
            Ok(())
        }
        ScheduleCommand::Rm { name } => {
            if !jobwire_core::delete_schedule(pool, &name).await? {
                bail!("no schedule is called {name:?}");
            }
            outln!("schedule {name:?} removed (the jobs it created stay)");
            Ok(())
        }
    }
}

async fn put(pool: &PgPool, args: PutArgs) -> Result<()> {
    let mut job = args.job.into_job(args.job_type)?;
    if let Some(tenant) = args.tenant {
        job = job.with_tenant(tenant);
    }
    let spec = ScheduleSpec {
        jitter_seconds: args.jitter_seconds,
        missed: args.missed.parse::<MissedRuns>()?,
        max_catch_up: args.max_catch_up,
        ..ScheduleSpec::new(&args.name, args.cron, args.timezone, job)
    };
    let created = jobwire_core::put_schedule(pool, &spec).await?;
    outln!(
        "schedule {:?} {}",
        args.name,
        if created { "created" } else { "replaced" }
    );
    if let Some(schedule) = jobwire_core::get_schedule(pool, &args.name).await? {
        print_schedule(&schedule, jobwire_core::database_now(pool).await?)?;
    }
    Ok(())
}

/// How late an occurrence may be before it is shown as overdue: the
/// scheduler looks every half second, so anything this late means that no
/// process is firing schedules.
const OVERDUE_AFTER: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// `now` is the database's clock, which the scheduler fires by.
fn print_schedule(schedule: &Schedule, now: DateTime<Utc>) -> Result<()> {
    let zone: chrono_tz::Tz = schedule.timezone.parse().unwrap_or(chrono_tz::UTC);
    outln!(
        "{}  {}  ({}){}",
        visible(&schedule.name),
        visible(&schedule.cron),
        visible(&schedule.timezone),
        if schedule.paused { "  PAUSED" } else { "" }
    );
    outln!(
        "  job        {} on queue {}{} (priority {}, {} attempts), payload {}",
        visible(&schedule.job_type),
        visible(&schedule.queue),
        schedule
            .tenant
            .as_deref()
            .map(|tenant| format!(" for tenant {}", visible(tenant)))
            .unwrap_or_default(),
        schedule.priority,
        schedule.max_attempts,
        visible(&schedule.payload.to_string())
    );
    outln!(
        "  jitter     {} s; missed runs: {} (catch-up cap {})",
        schedule.jitter_seconds,
        schedule.missed,
        schedule.max_catch_up
    );
    // Every time in the schedule's zone, then in UTC, as the next runs.
    let zoned_and_utc = |at: DateTime<Utc>| {
        format!(
            "{}  ({})",
            at.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S %Z"),
            at.format("%Y-%m-%dT%H:%M:%SZ"),
        )
    };
    match schedule.last_fired_for {
        Some(at) => outln!("  last fired {}", zoned_and_utc(at)),
        None => outln!("  last fired never"),
    }
    if let Some(problem) = schedule.problem() {
        outln!(
            "  PROBLEM    {}; it never fires (the scheduler pauses it when it comes due): \
             replace it with `jobwire schedule put {}`",
            visible(&problem),
            visible(&schedule.name)
        );
    }
    for (i, at) in schedule
        .upcoming(3)
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let late = now - at;
        let overdue = match i {
            _ if late <= OVERDUE_AFTER => String::new(),
            0 => format!(
                "  OVERDUE by {}: nothing fires schedules (every `jobwire worker` and `jobwire run` does, unless started with --no-scheduler)",
                humantime::format_duration(std::time::Duration::from_secs(
                    late.num_seconds().unsigned_abs()
                ))
            ),
            _ => "  OVERDUE".into(),
        };
        outln!("  next       {}{overdue}", zoned_and_utc(at));
    }
    Ok(())
}
