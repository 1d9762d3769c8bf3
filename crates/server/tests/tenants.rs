//! Tenant caps across many workers, on both paths, against a real
//! PostgreSQL (and RabbitMQ for the broker path): eight workers, a cap of
//! three running jobs per tenant, a sampler reading the table every few
//! milliseconds. No tenant ever has more than three jobs running; every job
//! finishes, once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobwire_consumer::{HandlerRegistry, JobContext, Worker};
use jobwire_core::{Dispatch, NewJob};
use jobwire_relay::{Relay, RelayConfig};
use jobwire_server::{Node, RunningNode};
use jobwire_test_support::brokers;
use jobwire_test_support::jobs::wait_for_all_finished;
use jobwire_test_support::worker::test_worker_config;
use jobwire_transport::Transport;
use jobwire_transport::rabbitmq::{RabbitConfig, RabbitTransport};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const CAP: u32 = 3;
const WORKERS: usize = 8;
const WAIT: Duration = Duration::from_secs(90);

/// How often the handler ran each job.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<Uuid, u32>>>);

fn registry(runs: &Runs) -> HandlerRegistry {
    let mut registry = HandlerRegistry::new();
    let runs = runs.clone();
    registry.register("tenant_work", move |ctx: JobContext| {
        *runs.0.lock().unwrap().entry(ctx.job_id()).or_default() += 1;
        async move {
            // Long enough that the workers' 32 slots want far more than the
            // caps allow, so the caps are what holds them back.
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(())
        }
    });
    registry
}

/// Jobs of three tenants: A with a backlog, B and C with a few each.
async fn enqueue_tenants(pool: &PgPool, queue: &str) -> Vec<Uuid> {
    let mut jobs = Vec::new();
    for (tenant, count) in [("A", 60), ("B", 15), ("C", 15)] {
        for i in 0..count {
            jobs.push(
                NewJob::new("tenant_work", json!({ "i": i }))
                    .with_queue(queue)
                    .with_tenant(tenant),
            );
        }
    }
    jobwire_test_support::enqueue_ids(pool, &jobs)
        .await
        .unwrap()
}

/// Read the running jobs per tenant every 3 ms until `stop`; the most each
/// tenant ever had.
fn sample_running(
    pool: PgPool,
    queue: String,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<HashMap<String, i64>> {
    tokio::spawn(async move {
        let mut most: HashMap<String, i64> = HashMap::new();
        while !stop.is_cancelled() {
            let rows: Vec<(String, i64)> = sqlx::query_as(
                "SELECT tenant, count(*) FROM jobs
                 WHERE queue = $1 AND state IN ('RUNNING', 'CANCEL_REQUESTED')
                 GROUP BY tenant",
            )
            .bind(&queue)
            .fetch_all(&pool)
            .await
            .unwrap();
            for (tenant, running) in rows {
                let seen = most.entry(tenant).or_default();
                *seen = (*seen).max(running);
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        most
    })
}

async fn check_outcome(
    pool: &PgPool,
    queue: &str,
    ids: &[Uuid],
    runs: &Runs,
    most: &HashMap<String, i64>,
) {
    for tenant in ["A", "B", "C"] {
        let seen = most.get(tenant).copied().unwrap_or(0);
        assert!(
            seen <= i64::from(CAP),
            "tenant {tenant} had {seen} jobs running: {most:?}"
        );
    }
    // The cap was reached, not merely respected by a slow run.
    assert_eq!(most.get("A").copied(), Some(i64::from(CAP)), "{most:?}");

    let outcomes: Vec<(String, i32, i64)> = sqlx::query_as(
        "SELECT state, attempt_count, count(*) FROM jobs WHERE queue = $1 GROUP BY 1, 2",
    )
    .bind(queue)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(outcomes, vec![("SUCCEEDED".into(), 1, ids.len() as i64)]);
    let runs = runs.0.lock().unwrap().clone();
    assert_eq!(runs.len(), ids.len(), "jobs that never ran");
    assert!(runs.values().all(|&n| n == 1), "a job ran twice: {runs:?}");
    // Every slot was given back.
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_tenant_slots WHERE queue = $1 AND job_id IS NOT NULL",
    )
    .bind(queue)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(held, 0);
}

/// Queue `capped` dispatched to a topic of its own on RabbitMQ, every
/// tenant capped at [`CAP`].
async fn capped_broker_queue(pool: &PgPool) {
    let topic = format!("jobwire-tenants-{}", Uuid::now_v7().simple());
    jobwire_core::set_queue_dispatch(pool, "capped", &Dispatch::Broker { topic })
        .await
        .unwrap();
    jobwire_core::set_tenant_cap(pool, "capped", None, Some(CAP))
        .await
        .unwrap();
}

/// A pool of its own for each worker process (the test's pool is small).
async fn own_pool(pool: &PgPool) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect_with((*pool.connect_options()).clone())
        .await
        .unwrap()
}

async fn stop_all(nodes: Vec<RunningNode>) {
    for mut node in nodes {
        node.stop().await.unwrap();
    }
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn eight_postgres_path_workers_never_run_more_than_the_cap_per_tenant(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "capped", None, Some(CAP))
        .await
        .unwrap();
    let ids = enqueue_tenants(&pool, "capped").await;
    let runs = Runs::default();
    let stop = CancellationToken::new();
    let sampler = sample_running(pool.clone(), "capped".into(), stop.clone());
    let mut nodes = Vec::new();
    for _ in 0..WORKERS {
        let own = own_pool(&pool).await;
        let worker = Worker::new(
            own.clone(),
            registry(&runs),
            test_worker_config("capped", 4),
        );
        nodes.push(Node::new(own).with_worker(worker).start().unwrap());
    }
    wait_for_all_finished(&pool, &ids, WAIT).await.unwrap();
    stop.cancel();
    let most = sampler.await.unwrap();
    stop_all(nodes).await;
    check_outcome(&pool, "capped", &ids, &runs, &most).await;
}

/// The broker path with no reconciler: each finished job's slot must hand
/// itself to its tenant's next job, or the backlog would never drain.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn eight_broker_consumers_never_run_more_than_the_cap_per_tenant(pool: PgPool) {
    capped_broker_queue(&pool).await;
    let ids = enqueue_tenants(&pool, "capped").await;
    // A's 60 jobs hold three wake-ups between them, not sixty.
    let wake_ups: Vec<(String, i64)> = sqlx::query_as(
        "SELECT j.tenant, count(*) FROM job_outbox o JOIN jobs j ON j.job_id::text = o.message_key
         GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        wake_ups,
        vec![("A".into(), 3), ("B".into(), 3), ("C".into(), 3)]
    );

    let runs = Runs::default();
    let stop = CancellationToken::new();
    let sampler = sample_running(pool.clone(), "capped".into(), stop.clone());
    let mut nodes = Vec::new();
    for n in 0..WORKERS {
        let own = own_pool(&pool).await;
        let transport: Arc<dyn Transport> =
            Arc::new(RabbitTransport::new(RabbitConfig::new(brokers::amqp_url())));
        let worker = Worker::new(
            own.clone(),
            registry(&runs),
            test_worker_config("capped", 4),
        )
        .with_transport(transport.clone());
        let mut node = Node::new(own.clone()).with_worker(worker);
        if n == 0 {
            let relay_config = RelayConfig {
                poll_interval: Duration::from_millis(100),
                ..RelayConfig::default()
            };
            node = node.with_relay(Relay::new(own, transport.clone(), relay_config));
        }
        nodes.push(node.closing(transport).start().unwrap());
    }
    wait_for_all_finished(&pool, &ids, WAIT).await.unwrap();
    stop.cancel();
    let most = sampler.await.unwrap();
    stop_all(nodes).await;
    check_outcome(&pool, "capped", &ids, &runs, &most).await;
}

/// A wake-up batch mixing capped tenants' jobs with others is claimed by
/// two statements. While the capped tenants' statement fails, the others'
/// jobs run at once (not after their leases lapse) and the capped jobs'
/// wake-ups go back to the broker, so they run once it works again.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_failing_capped_claim_runs_the_rest_of_the_batch_and_returns_its_wake_ups(pool: PgPool) {
    capped_broker_queue(&pool).await;
    // One of tenant A's jobs before every four without a tenant, so the
    // wake-ups the relay publishes in one go come in mixed batches. A's
    // first three jobs (its cap) have wake-ups; the other two wait for a
    // slot to be handed over.
    let jobs: Vec<NewJob> = (0..25)
        .map(|i| {
            let job = NewJob::new("tenant_work", json!({ "i": i })).with_queue("capped");
            if i % 5 == 0 {
                job.with_tenant("A")
            } else {
                job
            }
        })
        .collect();
    let ids = jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    let tenant_jobs: Vec<Uuid> = ids.iter().copied().step_by(5).collect();
    let untenanted: Vec<Uuid> = ids
        .iter()
        .copied()
        .filter(|id| !tenant_jobs.contains(id))
        .collect();
    jobwire_test_support::faults::break_capped_wake_up_claim(&pool).await;

    let runs = Runs::default();
    let transport: Arc<dyn Transport> =
        Arc::new(RabbitTransport::new(RabbitConfig::new(brokers::amqp_url())));
    let own = own_pool(&pool).await;
    let worker = Worker::new(
        own.clone(),
        registry(&runs),
        test_worker_config("capped", 32),
    )
    .with_transport(transport.clone());
    let relay_config = RelayConfig {
        poll_interval: Duration::from_millis(100),
        ..RelayConfig::default()
    };
    let relay = Relay::new(own.clone(), transport.clone(), relay_config);
    let mut node = Node::new(own)
        .with_worker(worker)
        .with_relay(relay)
        .closing(transport)
        .start()
        .unwrap();

    wait_for_all_finished(&pool, &untenanted, Duration::from_secs(30))
        .await
        .unwrap();
    let waiting: Vec<(String, i32)> = sqlx::query_as(
        "SELECT state::text, attempt_count FROM jobs WHERE tenant = 'A' ORDER BY job_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(waiting, vec![("QUEUED".to_owned(), 0); 5]);

    // Nothing but the given-back wake-ups can start A's jobs now (no
    // reconciler runs, and the safety net waits three minutes).
    jobwire_test_support::faults::repair_capped_wake_up_claim(&pool).await;
    wait_for_all_finished(&pool, &tenant_jobs, WAIT)
        .await
        .unwrap();
    node.stop().await.unwrap();
    let attempts: Vec<(String, i32, i64)> =
        sqlx::query_as("SELECT state::text, attempt_count, count(*) FROM jobs GROUP BY 1, 2")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(attempts, vec![("SUCCEEDED".into(), 1, 25)]);
    let runs = runs.0.lock().unwrap().clone();
    assert_eq!(runs.len(), 25);
    assert!(runs.values().all(|&n| n == 1), "a job ran twice: {runs:?}");
}

/// On the PostgreSQL path, the finish that frees a capped tenant's slot
/// starts its next job: each completion wakes the queue (heard here on the
/// wake channel), and the next job starts with the worker's idle poll at
/// ten minutes. One freed slot at a time, the tenant never past its cap.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_freed_slot_on_the_postgres_path_starts_the_tenants_next_job(pool: PgPool) {
    const JOBS: usize = 4;
    jobwire_core::set_tenant_cap(&pool, "capped", None, Some(1))
        .await
        .unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let started = Runs::default();
    let mut registry = HandlerRegistry::new();
    registry.register("gated", {
        let (gate, started) = (gate.clone(), started.clone());
        move |ctx: JobContext| {
            *started.0.lock().unwrap().entry(ctx.job_id()).or_default() += 1;
            let gate = gate.clone();
            async move {
                gate.acquire().await.unwrap().forget();
                Ok(())
            }
        }
    });
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| {
            NewJob::new("gated", json!({ "i": i }))
                .with_queue("capped")
                .with_tenant("A")
        })
        .collect();
    let ids = jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    let mut config = test_worker_config("capped", 4);
    config.poll_interval = Duration::from_secs(600);
    let own = own_pool(&pool).await;
    let mut node = Node::new(own.clone())
        .with_worker(Worker::new(own, registry, config))
        .start()
        .unwrap();
    let mut wakes = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    wakes.listen(jobwire_core::WAKE_CHANNEL).await.unwrap();
    let count = |runs: &Runs| runs.0.lock().unwrap().values().sum::<u32>();
    for n in 1..=JOBS as u32 {
        let deadline = tokio::time::Instant::now() + WAIT;
        while count(&started) < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} of {n} jobs started",
                count(&started)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Exactly one runs: the cap holds while the slot is taken.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(count(&started), n, "ran past the cap of 1");
        gate.add_permits(1);
        // The completion that frees the slot wakes the queue.
        let woken = tokio::time::timeout(WAIT, wakes.recv())
            .await
            .expect("the completion woke the queue")
            .unwrap();
        assert_eq!(woken.payload(), "capped");
    }
    wait_for_all_finished(&pool, &ids, WAIT).await.unwrap();
    node.stop().await.unwrap();
    let runs = started.0.lock().unwrap().clone();
    assert_eq!(runs.len(), JOBS);
    assert!(runs.values().all(|&n| n == 1), "a job ran twice: {runs:?}");
}

/// A worker stopped while it runs a capped tenant's jobs, with more of them
/// claimed ahead into its local queue, leaves no slot held: the running
/// jobs give theirs back as they end (here as cancelled, to run again),
/// the claimed-ahead ones as they are returned unstarted. Every job is
/// then waiting again, none lost.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_worker_stopped_mid_run_leaves_no_tenant_slot_held(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "capped", None, Some(CAP))
        .await
        .unwrap();
    let started = Runs::default();
    let mut registry = HandlerRegistry::new();
    registry.register("until_stopped", {
        let started = started.clone();
        move |ctx: JobContext| {
            *started.0.lock().unwrap().entry(ctx.job_id()).or_default() += 1;
            async move {
                ctx.cancelled().await;
                Err(jobwire_consumer::JobError::cancelled())
            }
        }
    });
    let jobs: Vec<NewJob> = (0..20)
        .map(|i| {
            NewJob::new("until_stopped", json!({ "i": i }))
                .with_queue("capped")
                .with_tenant(["A", "B"][i % 2])
        })
        .collect();
    let ids = jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    let own = own_pool(&pool).await;
    let mut node = Node::new(own.clone())
        .with_worker(Worker::new(own, registry, test_worker_config("capped", 16)))
        .start()
        .unwrap();
    // Both tenants at their cap.
    let deadline = tokio::time::Instant::now() + WAIT;
    while started.0.lock().unwrap().len() < 2 * CAP as usize {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the caps never filled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.stop().await.unwrap();

    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_tenant_slots WHERE queue = 'capped' AND job_id IS NOT NULL",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(held, 0, "a slot stayed held after the worker stopped");
    let states: Vec<(String, i64)> = sqlx::query_as(
        "SELECT state::text, count(*) FROM jobs WHERE job_id = ANY($1) GROUP BY 1 ORDER BY 1",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        states
            .iter()
            .all(|(state, _)| state == "QUEUED" || state == "RETRY_WAIT"),
        "{states:?}"
    );
    assert_eq!(states.iter().map(|(_, n)| n).sum::<i64>(), 20);
}
