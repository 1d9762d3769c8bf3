//! `jobwire faults`: the fault suite. Jobs on every path while workers and
//! relays are SIGKILLed on a timer, the brokers and PostgreSQL restart, the
//! queues pause and resume and garbage arrives on every wake-up channel;
//! then SQL checks on the contract columns (docs/reliability.md).
//!
//! It restarts shared services, so nothing else may use them meanwhile: run
//! it on its own (the test suite runs it in a test binary of its own, and
//! `cargo test` runs test binaries one after another).

mod checks;
mod database;
mod disruptions;
mod fleet;
mod load;
mod outages;
mod report;
mod timeline;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use jobwire_core::Dispatch;
use sqlx::postgres::PgPoolOptions;
use tokio_util::task::AbortOnDropHandle;

use crate::brokers::{BrokerArgs, BrokerKind};
use crate::shutdown::cancel_on_first_signal;
use checks::Expected;
use database::{ScenarioDatabase, database_url};
use fleet::{Fleet, ProcessSpec, Role};
use report::{Kills, Report};
use timeline::Disrupter;

#[derive(clap::Args)]
pub(crate) struct FaultArgs {
    /// Jobs enqueued on each path (at least 20).
    #[arg(long, default_value_t = 1000)]
    jobs_per_path: usize,
    /// The paths to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "postgres,rabbitmq,sqs,kafka"
    )]
    paths: Vec<FaultPath>,
    /// Seconds of faults; jobs are enqueued over the first 70 % of them
    /// (at most a day).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    fault_seconds: u64,
    /// Jobs each worker runs at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1000))]
    worker_concurrency: u32,
    /// Milliseconds between SIGKILLs of a worker or relay (0: no kills; at
    /// most a day).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    kill_every_ms: u64,
    /// What restarts services: run as `<SERVICES> restart <service>`.
    #[arg(long, default_value = "scripts/services")]
    services: PathBuf,
    /// No service restarts (for services this machine cannot restart).
    #[arg(long)]
    no_restarts: bool,
    /// Seconds to wait, once the enqueueing and every fault are over, for
    /// every job to be terminal and the outbox empty (at most a day).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    drain_timeout_s: u64,
    /// Where each process's log goes (default: a new directory in the
    /// system's temporary directory).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// What each worker's and relay's log records, as a `RUST_LOG` filter
    /// (this command's own lines follow `RUST_LOG`). The check that every
    /// outage ended reads their INFO lines.
    #[arg(long, default_value = "info")]
    process_log: String,
    /// Keep the scenario's database afterwards (its name is in the report).
    #[arg(long)]
    keep_database: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Run only the checks, again, on a database an earlier run kept
    /// (--keep-database), with the same --paths and --jobs-per-path.
    #[arg(long, value_name = "DATABASE")]
    recheck: Option<String>,
    #[command(flatten)]
    brokers: BrokerArgs,
}

/// A path jobs take from the table to a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FaultPath {
    Postgres,
    Rabbitmq,
    Sqs,
    Kafka,
}

impl FaultPath {
    pub(crate) fn name(self) -> &'static str {
        match self {
            FaultPath::Postgres => "postgres",
            FaultPath::Rabbitmq => "rabbitmq",
            FaultPath::Sqs => "sqs",
            FaultPath::Kafka => "kafka",
        }
    }

    /// The scenario's queue on this path.
    pub(crate) fn queue(self) -> String {
        format!("faults_{}", self.name())
    }

    /// The broker topic of this path's queue in run `run`: a topic of its
    /// own per run, so that what an earlier run left on a broker (a backlog,
    /// stale wake-ups) cannot slow this one down or pass for its traffic.
    pub(crate) fn topic(self, run: &str) -> String {
        format!("jobwire-faults-{}-{run}", self.name())
    }

    /// The broker carrying this path's wake-ups; `None` for PostgreSQL.
    pub(crate) fn broker(self) -> Option<BrokerKind> {
        match self {
            FaultPath::Postgres => None,
            FaultPath::Rabbitmq => Some(BrokerKind::Rabbitmq),
            FaultPath::Sqs => Some(BrokerKind::Sqs),
            FaultPath::Kafka => Some(BrokerKind::Kafka),
        }
    }
}

/// The share of the fault window over which jobs are enqueued.
const ENQUEUE_SHARE: f64 = 0.7;

/// Workers per path: one can die while the other carries on.
const WORKERS_PER_PATH: usize = 2;

impl FaultArgs {
    fn validate(&self) -> Result<()> {
        if self.jobs_per_path < 20 {
            bail!("--jobs-per-path must be at least 20 (every kind of job in the plan)");
        }
        if self.fault_seconds < 10 {
            bail!("--fault-seconds must be at least 10 (every fault needs its turn)");
        }
        if self.paths.is_empty() {
            bail!("--paths names no path");
        }
        if !self.no_restarts && !self.services.is_file() {
            bail!(
                "{} not found: pass --services with the script that restarts services (run from the repository, it is scripts/services), or --no-restarts",
                self.services.display()
            );
        }
        Ok(())
    }

    /// The paths asked for, each once, in the order given.
    fn paths(&self) -> Vec<FaultPath> {
        let mut paths = Vec::new();
        for path in &self.paths {
            if !paths.contains(path) {
                paths.push(*path);
            }
        }
        paths
    }
}

/// `jobwire faults`: fails (exit status 1) when any check fails.
pub(crate) async fn run(server_url: &str, args: FaultArgs) -> Result<()> {
    crate::database::require_postgres_url(server_url)?;
    if let Some(database) = &args.recheck {
        return recheck(server_url, database, &args).await;
    }
    args.validate()?;
    let database = ScenarioDatabase::create(server_url).await?;
    // Ctrl-C or SIGTERM drops the scenario, and with it the fleet: every
    // child process is killed, none is left behind (a second signal does
    // not cut that short).
    let interrupted = tokio_util::sync::CancellationToken::new();
    tokio::spawn(cancel_on_first_signal(interrupted.clone()));
    let outcome = tokio::select! {
        outcome = run_scenario(&database, &args) => outcome,
        _ = interrupted.cancelled() => Err(anyhow::anyhow!("interrupted")),
    };
    remove_topics(&args, &database.run).await;
    if !args.keep_database
        && let Err(err) = database.drop_database().await
    {
        eprintln!(
            "could not drop the scenario database {}: {err:#}",
            database.name
        );
    }
    let report = outcome?;
    if args.json {
        outln!("{}", crate::output::json_pretty(&report)?);
    } else {
        out!("{}", report.to_text());
    }
    if !report.passed() {
        bail!("{} check(s) failed", report.failed_checks());
    }
    Ok(())
}

/// Delete this run's topics from every broker (best effort: a broker that
/// cannot be reached keeps them, and says so).
async fn remove_topics(args: &FaultArgs, run: &str) {
    for path in args.paths() {
        let Some(kind) = path.broker() else { continue };
        let topic = path.topic(run);
        let removed = match args.brokers.transport(kind).await {
            Ok(Some(transport)) => {
                let removed = transport
                    .delete_topic(&topic)
                    .await
                    .map_err(anyhow::Error::from);
                let _ = transport.close().await;
                removed
            }
            Ok(None) => Ok(()),
            Err(err) => Err(err),
        };
        if let Err(err) = removed {
            eprintln!(
                "could not delete topic {topic} from {}: {err:#}",
                path.name()
            );
        }
    }
}

async fn run_scenario(database: &ScenarioDatabase, args: &FaultArgs) -> Result<Report> {
    let paths = args.paths();
    // Connections: 8 for each of the eight workers and 3 for each of the
    // three relays (all four paths), 4 here and 2 for the enqueuer: 79,
    // within PostgreSQL's default limit of 100.
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&database.url)
        .await
        .with_context(|| format!("cannot connect to {}", database.name))?;
    jobwire_core::migrate(&pool).await?;
    sqlx::raw_sql(checks::INSTRUMENTS).execute(&pool).await?;
    for path in &paths {
        if path.broker().is_some() {
            let topic = path.topic(&database.run);
            jobwire_core::set_queue_dispatch(&pool, &path.queue(), &Dispatch::Broker { topic })
                .await?;
        }
    }

    let log_dir = match &args.log_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(&database.name),
    };
    std::fs::create_dir_all(&log_dir)
        .with_context(|| format!("cannot create {}", log_dir.display()))?;
    let mut fleet = Fleet::start(
        fleet_specs(&paths, args.worker_concurrency, &database.run),
        child_env(args, database),
        &log_dir,
    )?;

    let plans: Vec<_> = paths
        .iter()
        .map(|path| load::plan_jobs(*path, args.jobs_per_path))
        .collect();
    let (keys, fatal_keys) = expected_keys(&plans);

    let fault_window = Duration::from_secs(args.fault_seconds);
    let start = Instant::now();
    // The enqueuer's own pool behaves like a service's: a connection the
    // restart broke fails the transaction using it (no ping first), and an
    // outage fails fast instead of waiting in the pool.
    let enqueue_pool = PgPoolOptions::new()
        .max_connections(2)
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&database.url)
        .await?;
    let (restart_begun, restart_seen) = tokio::sync::watch::channel(false);
    // Aborted if the scenario is dropped (Ctrl-C): nothing of it runs on.
    let enqueuer = AbortOnDropHandle::new(tokio::spawn(load::enqueue_all(
        enqueue_pool,
        plans,
        fault_window.mul_f64(ENQUEUE_SHARE),
        (!args.no_restarts).then_some(restart_seen),
    )));
    let disrupter = Disrupter {
        pool: pool.clone(),
        services: args.services.clone(),
        paths: paths.clone(),
        brokers: args.brokers.clone(),
        run: database.run.clone(),
        restart_begun,
    };
    let plan = timeline::schedule(!args.no_restarts, &paths, fault_window);
    let disruptions = AbortOnDropHandle::new(tokio::spawn(disrupter.run(plan, start)));

    let kill_every = Duration::from_millis(args.kill_every_ms);
    let mut next_kill = start + kill_every;
    let mut last_kill_at = Duration::ZERO;
    while start.elapsed() < fault_window {
        fleet.tend()?;
        if !kill_every.is_zero() && Instant::now() >= next_kill {
            fleet.kill_next().await?;
            last_kill_at = start.elapsed();
            next_kill += kill_every;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while !(enqueuer.is_finished() && disruptions.is_finished()) {
        fleet.tend()?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let load = enqueuer.await??;
    let (faults, garbage_messages) = disruptions.await?;
    fleet.restart_all_killed()?;

    let last_fault_at = faults
        .iter()
        .map(|fault| Duration::from_secs_f64(fault.at_s + fault.took_s))
        .chain([last_kill_at])
        .max()
        .unwrap_or_default();
    let drain_deadline = Instant::now() + Duration::from_secs(args.drain_timeout_s);
    let mut jobs_done_at = None;
    let drained = loop {
        fleet.tend()?;
        let (open, outbox): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM jobs WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')),
                    (SELECT count(*) FROM job_outbox)",
        )
        .fetch_one(&pool)
        .await?;
        if open == 0 && jobs_done_at.is_none() {
            jobs_done_at = Some(start.elapsed());
        }
        if open == 0 && outbox == 0 {
            break true;
        }
        if Instant::now() >= drain_deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let drain_after_last_fault = start.elapsed().saturating_sub(last_fault_at);
    let unended_outages = wait_for_outages_to_end(&mut fleet).await?;
    fleet.kill_all().await;

    let mut checks = checks::run_checks(
        &pool,
        &Expected {
            keys: &keys,
            fatal_keys: &fatal_keys,
        },
    )
    .await?;
    checks.push(checks::Check {
        name: "drained (every job terminal, the outbox empty) within the timeout".into(),
        violations: i64::from(!drained),
        examples: Vec::new(),
    });
    checks.push(checks::Check {
        name: "no worker or relay crashed".into(),
        violations: fleet.crashes.len() as i64,
        examples: fleet.crashes.iter().map(|c| c.process.clone()).collect(),
    });
    checks.push(checks::Check {
        name: "every loop that logged failures logged that they ended".into(),
        violations: unended_outages.len() as i64,
        examples: unended_outages,
    });
    checks.push(checks::Check {
        name: "every fault took place".into(),
        violations: faults.iter().filter(|f| f.error.is_some()).count() as i64,
        examples: faults
            .iter()
            .filter_map(|f| f.error.as_ref().map(|err| format!("{}: {err}", f.what)))
            .collect(),
    });
    let (extra_runs, leases_expired): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) - count(DISTINCT job_id) FROM handler_runs),
                -- The sweeper's own transitions: a job that later succeeds
                -- keeps LEASE_EXPIRED as its last error code, so the code
                -- alone would count it again.
                (SELECT count(*) FROM fault_transitions WHERE error_code = 'LEASE_EXPIRED'
                   AND from_state IN ('RUNNING', 'CANCEL_REQUESTED')
                   AND to_state IN ('QUEUED', 'RETRY_WAIT', 'FAILED'))",
    )
    .fetch_one(&pool)
    .await?;
    pool.close().await;

    Ok(Report {
        database: database.name.clone(),
        log_dir: log_dir.display().to_string(),
        paths: paths.iter().map(|path| path.name().to_owned()).collect(),
        jobs_per_path: args.jobs_per_path,
        load,
        kills: Kills::count(&fleet.kills),
        faults,
        garbage_messages,
        crashes: fleet.crashes.clone(),
        extra_runs,
        leases_expired,
        fault_seconds: fault_window.as_secs_f64(),
        last_fault_at_s: last_fault_at.as_secs_f64(),
        drained,
        drain_after_last_fault_s: drain_after_last_fault.as_secs_f64(),
        jobs_done_after_last_fault_s: jobs_done_at
            .map(|at| at.saturating_sub(last_fault_at).as_secs_f64()),
        checks,
    })
}

/// How long the loops get, once the jobs are done, to log that their
/// failures ended: a loop in its longest pause after a failure (5 s; the
/// relay's `max_backoff`, 30 s, plus its jitter of 20 %) tries again
/// within it.
const OUTAGES_END_WITHIN: Duration = Duration::from_secs(45);

/// The loops, in each process's current run, whose failures have no line
/// saying they ended, once every loop has had [`OUTAGES_END_WITHIN`] to
/// say so (as `process: what is missing`). A log with no INFO line at all
/// (a `--process-log` that hides them) cannot say, and is not read.
async fn wait_for_outages_to_end(fleet: &mut Fleet) -> Result<Vec<String>> {
    let deadline = Instant::now() + OUTAGES_END_WITHIN;
    loop {
        fleet.tend()?;
        let unended: Vec<String> = fleet
            .current_runs_logs()?
            .into_iter()
            .filter(|(_, log)| outages::shows_info_lines(log))
            .flat_map(|(process, log)| {
                outages::unended(&log)
                    .into_iter()
                    .map(move |missing| format!("{process}: {missing}"))
            })
            .collect();
        if unended.is_empty() || Instant::now() >= deadline {
            return Ok(unended);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every planned job's dedup key, and those of the jobs meant to fail.
fn expected_keys(plans: &[Vec<load::PlannedJob>]) -> (Vec<String>, Vec<String>) {
    let keys = plans
        .iter()
        .flatten()
        .map(|job| job.dedup_key.clone())
        .collect();
    let fatal_keys = plans
        .iter()
        .flatten()
        .filter(|job| job.plan == load::Plan::Fatal)
        .map(|job| job.dedup_key.clone())
        .collect();
    (keys, fatal_keys)
}

/// `--recheck`: the checks again, on a database an earlier run kept (the
/// plan is rebuilt from the same --paths and --jobs-per-path). For looking
/// at a failed run after the fact, and for testing the checks themselves.
async fn recheck(server_url: &str, database: &str, args: &FaultArgs) -> Result<()> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&database_url(server_url, database)?)
        .await
        .with_context(|| format!("cannot connect to {database}"))?;
    let plans: Vec<_> = args
        .paths()
        .into_iter()
        .map(|path| load::plan_jobs(path, args.jobs_per_path))
        .collect();
    let (keys, fatal_keys) = expected_keys(&plans);
    let checks = checks::run_checks(
        &pool,
        &Expected {
            keys: &keys,
            fatal_keys: &fatal_keys,
        },
    )
    .await?;
    let failed = checks.iter().filter(|check| !check.passed()).count();
    if args.json {
        outln!("{}", crate::output::json_pretty(&checks)?);
    } else {
        out!("{}", report::checks_table(&checks));
    }
    if failed > 0 {
        bail!("{failed} check(s) failed");
    }
    Ok(())
}

/// Two workers per path and one relay per broker path, each a `jobwire`
/// process with short leases and quick maintenance, so that every fault
/// resolves within seconds (a lost wake-up within the reconciler's 10 s
/// grace, or the safety net's 20 s).
fn fleet_specs(paths: &[FaultPath], concurrency: u32, run: &str) -> Vec<ProcessSpec> {
    let mut specs = Vec::new();
    for path in paths {
        let queue = path.queue();
        for number in 1..=WORKERS_PER_PATH {
            let mut args: Vec<String> = [
                "worker",
                "--pool-size",
                "8",
                "--queue",
                format!("{queue}={concurrency}").as_str(),
                "--lease-ms",
                "2000",
                "--sweep-interval-ms",
                "500",
                // A grace longer than a loaded broker's delivery time: each
                // re-wake is one more message, and a grace shorter than the
                // backlog's wait re-wakes every waiting job again and again
                // (seen against the SQS emulator, which then slowed further).
                "--reconcile-grace-s",
                "10",
                "--reconcile-interval-ms",
                "2000",
                "--safety-net-after-s",
                "20",
                "--backoff-base-ms",
                "200",
                "--backoff-max-ms",
                "2000",
                "--shutdown-timeout-s",
                "1",
                "--consumer-group",
                "jobwire-faults",
                // Finished jobs stay in `jobs` for the checks, however
                // long the run.
                "--no-retention",
            ]
            .map(str::to_owned)
            .to_vec();
            if path.broker().is_some() {
                args.extend(["--transport".to_owned(), path.name().to_owned()]);
            }
            specs.push(ProcessSpec {
                name: format!("{}-worker-{number}", path.name()),
                role: Role::Worker,
                args,
            });
        }
        if path.broker().is_some() {
            specs.push(ProcessSpec {
                name: format!("{}-relay", path.name()),
                role: Role::Relay,
                args: [
                    "relay",
                    "--pool-size",
                    "3",
                    "--transport",
                    path.name(),
                    "--only-topics",
                    path.topic(run).as_str(),
                    "--poll-ms",
                    "250",
                ]
                .map(str::to_owned)
                .to_vec(),
            });
        }
    }
    specs
}

/// The children's environment: the scenario's database and this command's
/// broker settings.
fn child_env(args: &FaultArgs, database: &ScenarioDatabase) -> Vec<(String, String)> {
    vec![
        ("DATABASE_URL".into(), database.url.clone()),
        ("AMQP_URL".into(), args.brokers.amqp_url.clone()),
        ("SQS_ENDPOINT".into(), args.brokers.sqs_endpoint.clone()),
        ("AWS_REGION".into(), args.brokers.sqs_region.clone()),
        (
            "KAFKA_BOOTSTRAP".into(),
            args.brokers.kafka_bootstrap.clone(),
        ),
        ("RUST_LOG".into(), args.process_log.clone()),
    ]
}
