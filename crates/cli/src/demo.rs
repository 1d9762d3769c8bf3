//! `jobwire demo`: the whole life of real jobs, end to end, on one database.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use chrono::TimeDelta;
use jobwire_consumer::maintenance::{MaintenanceConfig, SweeperConfig};
use jobwire_consumer::{
    HandlerOptions, HandlerRegistry, QueueConfig, RuntimeConfig, Worker, WorkerConfig,
};
use jobwire_core::{Backoff, JobState, NewJob};
use jobwire_relay::{Relay, RelayConfig};
use jobwire_server::Node;

use crate::brokers::BrokerKind;
use crate::database::redact;
use crate::shutdown::cancel_on_signal;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

mod tenants;

#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Give up waiting for the jobs after this many seconds (at most a day).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    timeout_s: u64,
    /// How wake-ups travel; default `memory`: outbox, relay and wake-up
    /// consumer in this process, nothing to install.
    #[command(flatten)]
    broker: crate::brokers::BrokerArgs,
    /// Afterwards, serve the dashboard (and the API) on this address, default
    /// 127.0.0.1:8080, and print its URL with a read-only token; Ctrl-C
    /// stops it.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8080",
          value_parser = crate::listen_address::parse)]
    serve: Option<std::net::SocketAddr>,
}

/// One demo job and the state it should end in.
struct DemoJob {
    label: &'static str,
    job: NewJob,
    expect: JobState,
}

const QUEUE: &str = "demo";

fn demo_jobs(run: &str) -> Vec<DemoJob> {
    let job = |label, job_type: &str, payload, expect| DemoJob {
        label,
        job: NewJob::new(job_type, payload).with_queue(QUEUE),
        expect,
    };
    let mut jobs = vec![
        job(
            "welcome email",
            "noop",
            json!({"user_id": 1}),
            JobState::Succeeded,
        ),
        job(
            "welcome email",
            "noop",
            json!({"user_id": 2}),
            JobState::Succeeded,
        ),
        job(
            "thumbnail",
            "sleep",
            json!({"ms": 300}),
            JobState::Succeeded,
        ),
        job(
            "thumbnail",
            "sleep",
            json!({"ms": 300}),
            JobState::Succeeded,
        ),
        job(
            "flaky webhook (fails twice)",
            "fail_times",
            json!({"times": 2}),
            JobState::Succeeded,
        ),
        job(
            "poison job (always fails)",
            "always_fail",
            json!({}),
            JobState::Failed,
        ),
        job(
            "bad input (fatal error)",
            "fail_fatal",
            json!({}),
            JobState::Failed,
        ),
        job(
            "job type no worker knows",
            "send_fax",
            json!({}),
            JobState::Failed,
        ),
        job(
            "long export (cancelled)",
            "sleep",
            json!({"ms": 600_000}),
            JobState::Cancelled,
        ),
    ];
    jobs[5].job.max_attempts = 3;
    jobs[2].job.priority = 1;
    jobs[3].job.priority = 1;
    jobs.push(DemoJob {
        label: "reminder (delayed 2 s)",
        job: NewJob::new("noop", json!({"user_id": 3}))
            .with_queue(QUEUE)
            .with_delay(TimeDelta::seconds(2)),
        expect: JobState::Succeeded,
    });
    jobs.push(DemoJob {
        label: "daily digest (dedup key)",
        job: NewJob::new("noop", json!({"digest": "daily"}))
            .with_queue(QUEUE)
            .with_dedup_key(format!("digest-{run}")),
        expect: JobState::Succeeded,
    });
    jobs
}

pub(crate) async fn run(database_url: &str, args: DemoArgs) -> Result<()> {
    crate::database::require_postgres_url(database_url)?;
    ensure_database(database_url).await?;
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(database_url)
        .await
        .with_context(|| format!("cannot connect to {}", redact(database_url)))?;
    jobwire_core::migrate(&pool).await?;
    let kind = args.broker.kind_or(BrokerKind::Memory);
    // The demo owns its queue: point it at this run's path every time.
    let dispatch = match kind {
        BrokerKind::Postgres => jobwire_core::Dispatch::Postgres,
        _ => jobwire_core::Dispatch::Broker {
            topic: crate::brokers::topic_for(QUEUE),
        },
    };
    jobwire_core::set_queue_dispatch(&pool, QUEUE, &dispatch).await?;
    let transport = args.broker.transport(kind).await?;
    let path = match kind {
        BrokerKind::Postgres => "PostgreSQL path (SKIP LOCKED + NOTIFY)".to_owned(),
        other => format!(
            "broker path over {other:?}: outbox -> relay -> topic {} -> wake-up -> fenced claim",
            crate::brokers::topic_for(QUEUE)
        )
        .to_lowercase(),
    };
    outln!("jobwire demo: schema migrated; {path}; queue {QUEUE:?}\n");

    let run = Uuid::now_v7().simple().to_string();
    let mut tracked: Vec<(String, Uuid, JobState)> = Vec::new();

    // 1. Transactional enqueue: the job lives or dies with the business row.
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS demo_orders (id uuid PRIMARY KEY, item text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&pool)
    .await?;
    let committed_order = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO demo_orders (id, item) VALUES ($1, 'teapot')")
        .bind(committed_order)
        .execute(&mut *tx)
        .await?;
    let confirmation = jobwire_core::enqueue(
        &mut *tx,
        &NewJob::new("noop", json!({"order_id": committed_order})).with_queue(QUEUE),
    )
    .await?;
    tx.commit().await?;
    tracked.push((
        "order confirmation (same tx as order)".into(),
        confirmation.job_id,
        JobState::Succeeded,
    ));

    let rolled_back_order = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO demo_orders (id, item) VALUES ($1, 'kettle')")
        .bind(rolled_back_order)
        .execute(&mut *tx)
        .await?;
    let lost = jobwire_core::enqueue(
        &mut *tx,
        &NewJob::new("noop", json!({"order_id": rolled_back_order})).with_queue(QUEUE),
    )
    .await?;
    tx.rollback().await?;
    let order_left = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM demo_orders WHERE id = $1")
        .bind(rolled_back_order)
        .fetch_one(&pool)
        .await?;
    let job_left = jobwire_core::job_status(&pool, lost.job_id).await.is_ok();
    outln!(
        "transactional enqueue: committed order -> job {}; rolled-back order left {} order rows and {} job",
        confirmation.job_id,
        order_left,
        if job_left { "a" } else { "no" }
    );
    if order_left != 0 || job_left {
        bail!("a rolled-back enqueue left rows behind");
    }

    // 2. A realistic mix, enqueued in one statement.
    let jobs = demo_jobs(&run);
    let new_jobs: Vec<NewJob> = jobs.iter().map(|job| job.job.clone()).collect();
    let enqueued = jobwire_core::enqueue_many(&pool, &new_jobs).await?;
    for (job, enqueued) in jobs.iter().zip(&enqueued) {
        tracked.push((job.label.into(), enqueued.job_id, job.expect));
    }
    let digest = jobs.last().expect("demo jobs").job.clone();
    let again = jobwire_core::enqueue(&pool, &digest).await?;
    outln!(
        "dedup: enqueueing the daily digest again returned job {} with duplicate = {}",
        again.job_id,
        again.duplicate
    );
    if !again.duplicate || again.job_id != enqueued.last().expect("enqueued").job_id {
        bail!("the dedup key did not hold");
    }
    // 3. Tenants: a cap on running jobs, and a limit on waiting ones.
    let tenant_jobs = tenants::enqueue(&pool, QUEUE).await?;
    tracked.extend(tenant_jobs.tracked.iter().cloned());
    outln!("enqueued {} jobs; starting a worker\n", tracked.len());

    // 4. A worker with demo-friendly timings.
    let mut registry = HandlerRegistry::new();
    jobwire_consumer::builtin::register_builtin_handlers(
        &mut registry,
        HandlerOptions {
            backoff: Backoff {
                base: Duration::from_millis(300),
                max: Duration::from_secs(2),
                jitter_ratio: 0.1,
            },
            ..HandlerOptions::default()
        },
    );
    let config = WorkerConfig {
        runtime: RuntimeConfig {
            lease: Duration::from_secs(3),
            ..RuntimeConfig::default()
        },
        queues: vec![QueueConfig::new(QUEUE, 8)],
        poll_interval: Duration::from_millis(250),
        shutdown_timeout: Duration::from_secs(5),
        ..WorkerConfig::default()
    };
    let maintenance = MaintenanceConfig {
        sweeper: Some(SweeperConfig {
            interval: Duration::from_secs(1),
            ..SweeperConfig::default()
        }),
        ..MaintenanceConfig::none()
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let mut worker = Worker::new(pool.clone(), registry, config);
    let mut node = Node::new(pool.clone()).with_maintenance(maintenance);
    if let Some(transport) = &transport {
        worker = worker.with_transport(transport.clone());
        let relay_config = RelayConfig {
            poll_interval: Duration::from_millis(250),
            ..RelayConfig::default()
        };
        node = node
            .with_relay(Relay::new(pool.clone(), transport.clone(), relay_config))
            .closing(transport.clone());
    }
    let watch = tenants::RunningWatch::start(pool.clone(), QUEUE);
    let mut node = node.with_worker(worker).start()?;

    // 5. Cancel the long export once it is running.
    let export = tracked
        .iter()
        .find(|(label, ..)| label.starts_with("long export"))
        .map(|(_, id, _)| *id)
        .expect("demo has a long export");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_s);
    wait_for(&pool, export, deadline, |state| state == JobState::Running).await?;
    let cancel = jobwire_core::request_cancel(&pool, export, "demo").await?;
    outln!("cancel requested for the running export: {cancel:?}");

    // 6. Wait for every job to finish.
    let ids: Vec<Uuid> = tracked.iter().map(|(_, id, _)| *id).collect();
    let finals = loop {
        let states = states(&pool, &ids).await?;
        if states.values().all(|status| status.0.is_terminal()) {
            break states;
        }
        if tokio::time::Instant::now() > deadline || shutdown.is_cancelled() {
            // Best effort: the demo is failing anyway; say why below.
            let _ = node.stop().await;
            bail!(
                "jobs still unfinished after {} s: {states:?}",
                args.timeout_s
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let most_running = watch.stop().await?;
    let stopped = node.stop().await?;
    let report = stopped.worker.context("the demo node runs a worker")?;
    let relayed = stopped.relays.first().copied();

    outln!(
        "\n{:<40} {:<12} {:<10} {:>8}  {:<18} ok",
        "job",
        "type",
        "state",
        "attempts",
        "last error"
    );
    let mut unexpected = 0;
    for (label, id, expect) in &tracked {
        let status = jobwire_core::job_status(&pool, *id).await?;
        let ok = status.state == *expect;
        unexpected += usize::from(!ok);
        outln!(
            "{:<40} {:<12} {:<10} {:>8}  {:<18} {}",
            label,
            status.job_type,
            status.state,
            status.attempt_count,
            status.last_error_code.as_deref().unwrap_or("-"),
            if ok {
                "yes".to_owned()
            } else {
                format!("NO (expected {expect})")
            }
        );
        debug_assert_eq!(finals[id].0, status.state);
    }
    outln!(
        "\nworker: {} claims, {} succeeded, {} retries, {} failed, {} cancelled, {} fenced, {} completion statements",
        report.claimed,
        report.succeeded,
        report.retried,
        report.failed,
        report.cancelled,
        report.fenced,
        report.completion_batches
    );
    if let Some(relayed) = relayed {
        outln!(
            "relay: {} wake-ups published in {} passes; worker: {} wake-ups received, {} stale or duplicate, {} garbage",
            relayed.published,
            relayed.passes,
            report.wake_ups,
            report.wake_ups_held + report.wake_ups_finished + report.wake_ups_duplicate,
            report.wake_ups_garbage
        );
    }
    if unexpected > 0 {
        bail!("{unexpected} jobs did not end as expected");
    }
    tenants::judge(&pool, &tenant_jobs, most_running).await?;
    outln!("every job ended as expected");
    if let Some(addr) = args.serve {
        serve_dashboard(&pool, addr, shutdown).await?;
    }
    Ok(())
}

/// The name of the read-only token the demo hands out; each run replaces
/// the last one, so demo runs do not pile up tokens.
const VIEWER_TOKEN: &str = "demo-viewer";

/// Serve the dashboard over the demo's database until Ctrl-C, with a fresh
/// read-only token to log in with.
async fn serve_dashboard(
    pool: &PgPool,
    addr: std::net::SocketAddr,
    shutdown: CancellationToken,
) -> Result<()> {
    let server = jobwire_server::HttpServer::bind(addr, pool.clone())
        .await
        .with_context(|| {
            format!("cannot listen on {addr} (is something else there? pass --serve ADDR)")
        })?;
    let addr = server.local_addr()?;
    // A schedule to look at (the demo runs no scheduler, so it never fires
    // here; a worker would). Putting it again keeps its timeline.
    let digest = NewJob::new("noop", json!({"digest": "nightly"})).with_queue(QUEUE);
    jobwire_core::put_schedule(
        pool,
        &jobwire_core::ScheduleSpec::new(
            "demo-nightly-digest",
            "30 2 * * *",
            "Europe/Berlin",
            digest,
        ),
    )
    .await?;
    jobwire_core::revoke_api_token(pool, VIEWER_TOKEN).await?;
    let token =
        jobwire_core::create_api_token(pool, VIEWER_TOKEN, jobwire_core::Scope::Read).await?;
    outln!("\ndashboard: http://{addr}/ui");
    outln!(
        "read-only token (log in with it; shown once): {}",
        token.secret
    );
    outln!("(every demo run kept in this database shows, and a schedule the demo put)");
    outln!("serving until Ctrl-C");
    server.run(shutdown).await?;
    Ok(())
}

async fn states(pool: &PgPool, ids: &[Uuid]) -> Result<HashMap<Uuid, (JobState, i32)>> {
    let rows: Vec<(Uuid, String, i32)> =
        sqlx::query_as("SELECT job_id, state, attempt_count FROM jobs WHERE job_id = ANY($1)")
            .bind(ids)
            .fetch_all(pool)
            .await?;
    rows.into_iter()
        .map(|(id, state, attempts)| Ok((id, (state.parse()?, attempts))))
        .collect()
}

async fn wait_for(
    pool: &PgPool,
    job_id: Uuid,
    deadline: tokio::time::Instant,
    done: impl Fn(JobState) -> bool,
) -> Result<()> {
    loop {
        let status = jobwire_core::job_status(pool, job_id).await?;
        if done(status.state) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("job {job_id} stayed {}", status.state);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Create the demo's database if it does not exist yet, so that a fresh
/// PostgreSQL is enough.
async fn ensure_database(database_url: &str) -> Result<()> {
    let options: PgConnectOptions = database_url
        .parse()
        .with_context(|| format!("bad database URL {}", redact(database_url)))?;
    let Some(name) = options.get_database().map(str::to_owned) else {
        return Ok(());
    };
    if options.clone().connect().await.is_ok() {
        return Ok(());
    }
    let mut admin = options
        .database("postgres")
        .connect()
        .await
        .with_context(|| format!("cannot reach PostgreSQL at {}", redact(database_url)))?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut admin)
            .await?;
    if !exists {
        // CREATE DATABASE takes no bind parameters; the name is quoted as an
        // identifier (embedded quotes doubled), which is the audit sqlx asks for.
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {quoted}")))
            .execute(&mut admin)
            .await?;
        outln!("created database {name}");
    }
    admin.close().await?;
    Ok(())
}
