//! The broker path end to end, against a real PostgreSQL and each real
//! broker: deliveries are only wake-ups, every job runs exactly once in the
//! table, retries come back through the outbox, lost wake-ups are re-created
//! by the reconciler, and effects recorded under an effect key happen once.
//!
//! SQS runs against the moto emulator, which slows down as a queue fills, so
//! its volume is scaled down (300 jobs instead of 10,000): moto spends time
//! proportional to the queue's depth on every message sent (it recounts the
//! queue's messages each time), so a thousand queued wake-ups took over 20 s
//! to send on a quiet 2-core machine, its calls then outlasted the client's
//! timeout, and the relay's retried batches deepened the queue further.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jobwire_consumer::maintenance::{MaintenanceConfig, ReconcilerConfig, SweeperConfig};
use jobwire_consumer::{
    HandlerRegistry, JobContext, JobError, QueueConfig, RuntimeConfig, Worker, WorkerConfig,
    WorkerReport, WorkerStats,
};
use jobwire_core::effects::{self, Effect};
use jobwire_core::{Dispatch, JobState, NewJob};
use jobwire_relay::{Relay, RelayConfig, RelayReport};
use jobwire_server::{Node, RunningNode};
use jobwire_test_support::{
    brokers, fast_options, test_maintenance, wait_for_all_finished, wait_for_state,
};
use jobwire_transport::kafka::{KafkaConfig, KafkaTransport};
use jobwire_transport::memory::MemoryTransport;
use jobwire_transport::rabbitmq::{RabbitConfig, RabbitTransport};
use jobwire_transport::sqs::{SqsConfig, SqsTransport};
use jobwire_transport::{
    Capabilities, Envelope, PublishError, SubscribeOptions, Subscriber, Transport, TransportError,
    header,
};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(180);

/// Which broker a scenario runs on.
#[derive(Clone, Copy, Debug)]
enum Broker {
    Memory,
    Rabbitmq,
    Sqs,
    Kafka,
}

impl Broker {
    async fn transport(self, memory: &MemoryTransport) -> Arc<dyn Transport> {
        match self {
            Broker::Memory => Arc::new(memory.clone()),
            Broker::Rabbitmq => {
                Arc::new(RabbitTransport::new(RabbitConfig::new(brokers::amqp_url())))
            }
            Broker::Sqs => {
                Arc::new(SqsTransport::new(SqsConfig::local(brokers::sqs_endpoint())).await)
            }
            Broker::Kafka => {
                let mut config = KafkaConfig::new(brokers::kafka_bootstrap());
                config.timeout = Duration::from_secs(15);
                Arc::new(KafkaTransport::new(config).unwrap())
            }
        }
    }

    /// How many jobs the volume scenario runs.
    fn volume(self) -> usize {
        match self {
            Broker::Sqs => 300,
            _ => 10_000,
        }
    }
}

/// Everything a scenario needs: a queue of its own dispatched through the
/// broker on a topic of its own, and the transport.
struct Setup {
    pool: PgPool,
    queue: String,
    topic: String,
    broker: Broker,
    memory: MemoryTransport,
}

impl Setup {
    async fn new(connect: PgConnectOptions, broker: Broker) -> Self {
        let pool = PgPoolOptions::new()
            .max_connections(20)
            .connect_with(connect)
            .await
            .unwrap();
        let suffix = &Uuid::new_v4().simple().to_string()[..12];
        let queue = format!("q-{suffix}");
        let topic = format!("wake-{suffix}");
        jobwire_core::set_queue_dispatch(
            &pool,
            &queue,
            &Dispatch::Broker {
                topic: topic.clone(),
            },
        )
        .await
        .unwrap();
        Setup {
            pool,
            queue,
            topic,
            broker,
            memory: MemoryTransport::default(),
        }
    }

    async fn transport(&self) -> Arc<dyn Transport> {
        self.broker.transport(&self.memory).await
    }

    fn job(&self, job_type: &str, payload: serde_json::Value) -> NewJob {
        NewJob::new(job_type, payload).with_queue(&self.queue)
    }

    /// Enqueue `count` jobs of the counting handler (`{"i": 0..count}`) in
    /// one statement; their ids in order.
    async fn enqueue_counted(&self, count: usize) -> Vec<Uuid> {
        let jobs: Vec<NewJob> = (0..count)
            .map(|i| self.job("counted", json!({ "i": i })))
            .collect();
        jobwire_test_support::enqueue_ids(&self.pool, &jobs)
            .await
            .unwrap()
    }

    fn worker_config(&self, concurrency: usize) -> WorkerConfig {
        WorkerConfig {
            runtime: RuntimeConfig {
                lease: Duration::from_secs(3),
                cancel_grace: Duration::from_millis(500),
                ..RuntimeConfig::default()
            },
            queues: vec![QueueConfig::new(&self.queue, concurrency)],
            receive_wait: Duration::from_millis(500),
            subscribe: SubscribeOptions {
                group: format!("group-{}", self.queue),
                ..SubscribeOptions::default()
            },
            shutdown_timeout: Duration::from_secs(5),
            ..WorkerConfig::default()
        }
    }

    /// The maintenance beside a scenario's worker: a sweeper every 300 ms,
    /// nothing else.
    fn maintenance(&self) -> MaintenanceConfig {
        MaintenanceConfig {
            sweeper: Some(SweeperConfig {
                interval: Duration::from_millis(300),
                ..SweeperConfig::default()
            }),
            ..MaintenanceConfig::none()
        }
    }

    async fn start_relay(&self, transport: Arc<dyn Transport>) -> RunningRelay {
        let config = RelayConfig {
            batch_size: 500,
            poll_interval: Duration::from_millis(200),
            ..RelayConfig::default()
        };
        let relay = Relay::new(self.pool.clone(), transport, config);
        let node = Node::new(self.pool.clone())
            .with_relay(relay)
            .start()
            .unwrap();
        RunningRelay { node }
    }

    /// A worker with [`Setup::maintenance`] beside it.
    fn start_worker(
        &self,
        registry: HandlerRegistry,
        transport: Arc<dyn Transport>,
        config: WorkerConfig,
    ) -> RunningWorker {
        self.start_worker_with(registry, transport, config, self.maintenance())
    }

    fn start_worker_with(
        &self,
        registry: HandlerRegistry,
        transport: Arc<dyn Transport>,
        config: WorkerConfig,
        maintenance: MaintenanceConfig,
    ) -> RunningWorker {
        let worker = Worker::new(self.pool.clone(), registry, config).with_transport(transport);
        let stats = worker.stats();
        let node = Node::new(self.pool.clone())
            .with_worker(worker)
            .with_maintenance(maintenance)
            .start()
            .unwrap();
        RunningWorker { node, stats }
    }
}

/// A node running a scenario's worker and its maintenance.
struct RunningWorker {
    node: RunningNode,
    /// The worker's live counters.
    stats: Arc<WorkerStats>,
}

impl RunningWorker {
    async fn stop(mut self) -> WorkerReport {
        let report = self.node.stop().await.unwrap();
        report.worker.expect("the node ran a worker")
    }
}

/// A node running a scenario's relay.
struct RunningRelay {
    node: RunningNode,
}

impl RunningRelay {
    async fn stop(mut self) -> RelayReport {
        let mut report = self.node.stop().await.unwrap();
        assert_eq!(report.relays.len(), 1, "the node ran one relay");
        report.relays.remove(0)
    }
}

/// Handler runs, counted per job: the proof of "exactly once".
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<Uuid, u32>>>);

impl Runs {
    fn total(&self) -> u32 {
        self.0.lock().unwrap().values().sum()
    }

    fn more_than_once(&self) -> usize {
        self.0.lock().unwrap().values().filter(|n| **n > 1).count()
    }
}

/// The handlers every path runs, unchanged: the built-ins plus `counted`.
fn registry(runs: &Runs) -> HandlerRegistry {
    let mut registry = HandlerRegistry::new();
    jobwire_consumer::builtin::register_builtin_handlers(&mut registry, fast_options());
    let runs = runs.clone();
    registry.register_with(
        "counted",
        move |ctx: JobContext| {
            let runs = runs.clone();
            async move {
                *runs.0.lock().unwrap().entry(ctx.job_id()).or_default() += 1;
                Ok(())
            }
        },
        fast_options(),
    );
    registry
}

/// Enqueue `count` jobs in business transactions of 50: each transaction
/// writes 50 business rows and their 50 jobs (and wake-ups) together.
async fn enqueue_in_business_transactions(setup: &Setup, count: usize) -> Vec<Uuid> {
    sqlx::query("CREATE TABLE IF NOT EXISTS signups (id uuid PRIMARY KEY)")
        .execute(&setup.pool)
        .await
        .unwrap();
    let mut ids = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(50) {
        let mut tx = setup.pool.begin().await.unwrap();
        let signups: Vec<Uuid> = chunk.iter().map(|_| Uuid::now_v7()).collect();
        sqlx::query("INSERT INTO signups (id) SELECT unnest($1::uuid[])")
            .bind(&signups)
            .execute(&mut *tx)
            .await
            .unwrap();
        let jobs: Vec<NewJob> = signups
            .iter()
            .map(|signup| setup.job("counted", json!({ "signup": signup })))
            .collect();
        let enqueued = jobwire_core::enqueue_many(&mut *tx, &jobs).await.unwrap();
        tx.commit().await.unwrap();
        ids.extend(enqueued.into_iter().map(|job| job.job_id));
    }
    ids
}

async fn jobs_by_state(pool: &PgPool, ids: &[Uuid]) -> Vec<(String, i32, i64)> {
    sqlx::query_as(
        "SELECT state, attempt_count, count(*) FROM jobs WHERE job_id = ANY($1) GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .bind(ids)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn volume_runs_every_job_exactly_once(connect: PgConnectOptions, broker: Broker) {
    let setup = Setup::new(connect, broker).await;
    let runs = Runs::default();
    let transport = setup.transport().await;
    let worker = setup.start_worker(registry(&runs), transport.clone(), setup.worker_config(32));
    let relay = setup.start_relay(transport.clone()).await;
    let ids = enqueue_in_business_transactions(&setup, broker.volume()).await;
    wait_for_all_finished(&setup.pool, &ids, WAIT)
        .await
        .unwrap();
    let report = worker.stop().await;
    let relayed = relay.stop().await;
    assert_eq!(
        jobs_by_state(&setup.pool, &ids).await,
        vec![("SUCCEEDED".to_owned(), 1, ids.len() as i64)],
        "{broker:?}"
    );
    assert_eq!(runs.total() as usize, ids.len(), "{broker:?}: handler runs");
    assert_eq!(runs.more_than_once(), 0, "{broker:?}: a job ran twice");
    assert_eq!(report.succeeded as usize, ids.len());
    assert_eq!(report.fenced, 0);
    assert!(relayed.published as usize >= ids.len());
    println!("{broker:?}: {} jobs, {report:?}, {relayed:?}", ids.len());
}

async fn retries_poison_and_cancel(connect: PgConnectOptions, broker: Broker) {
    let setup = Setup::new(connect, broker).await;
    let runs = Runs::default();
    let transport = setup.transport().await;
    let relay = setup.start_relay(transport.clone()).await;
    let worker = setup.start_worker(registry(&runs), transport.clone(), setup.worker_config(8));
    let flaky = jobwire_core::enqueue(&setup.pool, &setup.job("fail_times", json!({"times": 2})))
        .await
        .unwrap()
        .job_id;
    let poison = jobwire_core::enqueue(
        &setup.pool,
        &setup.job("always_fail", json!({})).with_max_attempts(3),
    )
    .await
    .unwrap()
    .job_id;
    let long = jobwire_core::enqueue(&setup.pool, &setup.job("sleep", json!({"ms": 600_000})))
        .await
        .unwrap()
        .job_id;
    let other_ids = setup.enqueue_counted(20).await;

    wait_for_state(&setup.pool, long, JobState::Running, WAIT)
        .await
        .unwrap();
    jobwire_core::request_cancel(&setup.pool, long, "test")
        .await
        .unwrap();
    let flaky = wait_for_state(&setup.pool, flaky, JobState::Succeeded, WAIT)
        .await
        .unwrap();
    let poison = wait_for_state(&setup.pool, poison, JobState::Failed, WAIT)
        .await
        .unwrap();
    let long = wait_for_state(&setup.pool, long, JobState::Cancelled, WAIT)
        .await
        .unwrap();
    wait_for_all_finished(&setup.pool, &other_ids, WAIT)
        .await
        .unwrap();
    let report = worker.stop().await;
    relay.stop().await;

    assert_eq!(
        flaky.attempt_count, 3,
        "{broker:?}: retried twice through the outbox"
    );
    assert_eq!(flaky.last_error_code.as_deref(), Some("FLAKY"));
    assert_eq!(poison.attempt_count, 3);
    assert_eq!(poison.last_error_code.as_deref(), Some("ALWAYS_FAILS"));
    assert_eq!(long.last_error_code.as_deref(), Some("CANCELLED"));
    assert_eq!(
        jobs_by_state(&setup.pool, &other_ids).await,
        vec![("SUCCEEDED".to_owned(), 1, 20)]
    );
    assert!(
        poison.finished_at.unwrap() > wait_for_last_finish(&setup.pool, &other_ids).await,
        "{broker:?}: the poison job held the others back"
    );
    assert_eq!((report.retried, report.failed, report.cancelled), (4, 1, 1));
}

async fn wait_for_last_finish(pool: &PgPool, ids: &[Uuid]) -> chrono::DateTime<chrono::Utc> {
    sqlx::query_scalar("SELECT max(finished_at) FROM jobs WHERE job_id = ANY($1)")
        .bind(ids)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A transport that publishes every message twice: every wake-up arrives
/// (at least) twice.
struct Doubling(Arc<dyn Transport>);

#[async_trait]
impl Transport for Doubling {
    fn name(&self) -> &'static str {
        "doubling"
    }

    fn address(&self) -> String {
        self.0.address()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Result<(), PublishError>> {
        let first = self.0.publish(batch).await;
        let second = self.0.publish(batch).await;
        first
            .into_iter()
            .zip(second)
            .map(|(a, b)| a.and(b))
            .collect()
    }

    async fn subscribe(
        &self,
        topic: &str,
        options: &SubscribeOptions,
    ) -> Result<Box<dyn Subscriber>, TransportError> {
        self.0.subscribe(topic, options).await
    }

    async fn close(&self) -> Result<(), TransportError> {
        self.0.close().await
    }
}

async fn duplicate_stale_and_garbage_wake_ups_run_nothing(
    connect: PgConnectOptions,
    broker: Broker,
) {
    let setup = Setup::new(connect, broker).await;
    let runs = Runs::default();
    let transport = setup.transport().await;
    let doubling: Arc<dyn Transport> = Arc::new(Doubling(transport.clone()));
    let relay = setup.start_relay(doubling).await;
    let worker = setup.start_worker(registry(&runs), transport.clone(), setup.worker_config(8));
    let ids = setup.enqueue_counted(200).await;
    wait_for_all_finished(&setup.pool, &ids, WAIT)
        .await
        .unwrap();

    // Stale wake-ups for finished jobs, and garbage, straight onto the topic.
    let mut junk = Vec::new();
    for (n, id) in ids.iter().take(20).enumerate() {
        let mut headers = jobwire_transport::Headers::new();
        headers.insert(header::OUTBOX_ID.into(), (1_000_000 + n).to_string());
        junk.push(Envelope {
            outbox_id: 1_000_000 + n as i64,
            topic: setup.topic.clone(),
            key: Some(id.to_string()),
            payload: json!({ "job_id": id }).to_string().into_bytes(),
            headers,
        });
    }
    for (n, garbage) in [&b"\x00\x01 not json"[..], b"{\"job_id\": 42}", b"{}"]
        .iter()
        .enumerate()
    {
        junk.push(Envelope {
            outbox_id: 2_000_000 + n as i64,
            topic: setup.topic.clone(),
            key: Some(format!("garbage-{n}")),
            payload: garbage.to_vec(),
            headers: jobwire_transport::Headers::new(),
        });
    }
    let published = transport.publish(&junk).await;
    // SQS carries text only: the binary garbage is refused at publish, the
    // rest go through.
    let delivered_junk = published.iter().filter(|r| r.is_ok()).count();
    assert!(delivered_junk >= 22, "{published:?}");

    // Wait until the worker has seen every second copy, the stale wake-ups
    // and the garbage (on Kafka the partitions are read at their own pace,
    // so the stale ones can arrive before the last second copies).
    let garbage = delivered_junk - 20;
    let stats = worker.stats.clone();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let live = stats.report();
        let misses = live.wake_ups_held
            + live.wake_ups_finished
            + live.wake_ups_duplicate
            + live.wake_ups_contended;
        if misses >= 200 + 20
            && live.wake_ups_finished >= 20
            && live.wake_ups_garbage >= garbage as u64
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{broker:?}: junk never arrived: {live:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = worker.stop().await;
    relay.stop().await;
    assert_eq!(
        runs.total(),
        200,
        "{broker:?}: extra handler runs: {report:?}"
    );
    assert_eq!(runs.more_than_once(), 0);
    let misses = report.wake_ups_held
        + report.wake_ups_finished
        + report.wake_ups_duplicate
        + report.wake_ups_contended;
    assert!(
        misses >= 200 + 20,
        "{broker:?}: second copies and stale wake-ups: {report:?}"
    );
    assert!(report.wake_ups_finished >= 20, "{report:?}");
    assert!(report.wake_ups_garbage >= 2, "{report:?}");
    assert_eq!(report.claimed, 200);
}

async fn lost_wake_ups_are_recreated_by_the_reconciler(connect: PgConnectOptions, broker: Broker) {
    let setup = Setup::new(connect, broker).await;
    let runs = Runs::default();
    let transport = setup.transport().await;
    let ids = setup.enqueue_counted(30).await;
    let relay = setup.start_relay(transport.clone()).await;
    if matches!(broker, Broker::Kafka) {
        // Kafka has no purge: the wake-ups are lost instead to a member of
        // the workers' group that takes them and acknowledges them without
        // claiming (a worker that died between receive and claim).
        let mut black_hole = transport
            .subscribe(
                &setup.topic,
                &SubscribeOptions {
                    group: format!("group-{}", setup.queue),
                    ..SubscribeOptions::default()
                },
            )
            .await
            .unwrap();
        let mut swallowed = 0;
        let deadline = tokio::time::Instant::now() + WAIT;
        while swallowed < ids.len() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "wake-ups never arrived"
            );
            let got = black_hole
                .receive(100, Duration::from_secs(1))
                .await
                .unwrap();
            swallowed += got.len();
            let receipts: Vec<_> = got.iter().map(|d| d.receipt.clone()).collect();
            black_hole.ack(&receipts).await.unwrap();
        }
        black_hole.close().await.unwrap();
    } else {
        // The relay publishes every wake-up, then an operator purges the queue.
        let deadline = tokio::time::Instant::now() + WAIT;
        while jobwire_test_support::outbox_len(&setup.pool).await.unwrap() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "relay did not publish"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Publishing is confirmed before the row is deleted, so all 30 are
        // on the queue now (SQS does not report a count).
        let purged = transport.purge(&setup.topic).await.unwrap();
        if let Some(purged) = purged {
            assert_eq!(purged, 30, "{broker:?}");
        }
    }
    assert_eq!(
        jobs_by_state(&setup.pool, &ids).await,
        vec![("QUEUED".to_owned(), 0, 30)],
        "nothing ran: the wake-ups are gone"
    );

    let maintenance = MaintenanceConfig {
        reconciler: Some(ReconcilerConfig {
            interval: Duration::from_millis(300),
            grace: Duration::from_secs(1),
            ..ReconcilerConfig::default()
        }),
        ..setup.maintenance()
    };
    let worker = setup.start_worker_with(
        registry(&runs),
        transport.clone(),
        setup.worker_config(8),
        maintenance,
    );
    wait_for_all_finished(&setup.pool, &ids, WAIT)
        .await
        .unwrap();
    worker.stop().await;
    relay.stop().await;
    assert_eq!(runs.total(), 30);
    assert_eq!(
        jobs_by_state(&setup.pool, &ids).await,
        vec![("SUCCEEDED".to_owned(), 1, 30)]
    );
}

async fn effects_happen_once_across_crashes_and_duplicates(
    connect: PgConnectOptions,
    broker: Broker,
) {
    let setup = Setup::new(connect, broker).await;
    sqlx::query("CREATE TABLE payments (id bigserial PRIMARY KEY, job_id uuid NOT NULL, amount int NOT NULL)")
        .execute(&setup.pool)
        .await
        .unwrap();
    let mut registry = HandlerRegistry::new();
    registry.register_with(
        "charge",
        |ctx: JobContext| async move {
            let key = effects::effect_key(ctx.job_id(), "charge");
            let mut tx = ctx
                .pool()
                .begin()
                .await
                .map_err(|e| JobError::retryable("DB", e))?;
            let first_time = match effects::begin::<i64>(&mut tx, &key, ctx.job_id())
                .await
                .map_err(|e| JobError::retryable("DB", e))?
            {
                Effect::Done(_payment) => false,
                Effect::New => {
                    let payment: i64 = sqlx::query_scalar(
                        "INSERT INTO payments (job_id, amount) VALUES ($1, 100) RETURNING id",
                    )
                    .bind(ctx.job_id())
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|e| JobError::retryable("DB", e))?;
                    effects::finish(&mut tx, &key, &payment)
                        .await
                        .map_err(|e| JobError::retryable("DB", e))?;
                    true
                }
            };
            if first_time && ctx.attempt() == 1 {
                // The effect is committed, then the worker "crashes" before
                // it can report: the attempt fails and the job runs again.
                tx.commit()
                    .await
                    .map_err(|e| JobError::retryable("DB", e))?;
                panic!("crash right after the effect");
            }
            // Effect (if new) and completion commit together.
            ctx.commit_with_completion(tx).await
        },
        fast_options(),
    );
    let transport = setup.transport().await;
    let relay = setup
        .start_relay(Arc::new(Doubling(transport.clone())))
        .await;
    let worker = setup.start_worker(registry, transport.clone(), setup.worker_config(8));
    let jobs: Vec<NewJob> = (0..50)
        .map(|i| setup.job("charge", json!({ "i": i })))
        .collect();
    let ids: Vec<Uuid> = jobwire_test_support::enqueue_ids(&setup.pool, &jobs)
        .await
        .unwrap();
    wait_for_all_finished(&setup.pool, &ids, WAIT)
        .await
        .unwrap();
    let report = worker.stop().await;
    relay.stop().await;
    let per_job: Vec<(i64,)> =
        sqlx::query_as("SELECT count(*) FROM payments GROUP BY job_id HAVING count(*) <> 1")
            .fetch_all(&setup.pool)
            .await
            .unwrap();
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM payments")
        .fetch_one(&setup.pool)
        .await
        .unwrap();
    assert!(per_job.is_empty(), "{broker:?}: a job paid twice");
    assert_eq!(total, 50, "{broker:?}: one payment per job");
    assert_eq!(
        jobs_by_state(&setup.pool, &ids).await,
        vec![("SUCCEEDED".to_owned(), 2, 50)]
    );
    assert_eq!(report.completed_by_handler, 50);
    assert_eq!(report.panicked, 50);
}

/// Wait until `done` holds for the worker's live counters, or fail after WAIT.
async fn wait_for_report(stats: &WorkerStats, what: &str, done: impl Fn(&WorkerReport) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let report = stats.report();
        if done(&report) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: still {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_paused_queue_claims_nothing_until_resumed(connect: PgConnectOptions, broker: Broker) {
    let setup = Setup::new(connect, broker).await;
    let runs = Runs::default();
    let transport = setup.transport().await;
    jobwire_core::set_queue_paused(&setup.pool, &setup.queue, true)
        .await
        .unwrap();
    let relay = setup.start_relay(transport.clone()).await;
    let worker = setup.start_worker(registry(&runs), transport.clone(), setup.worker_config(8));
    let ids = setup.enqueue_counted(20).await;
    // Every wake-up reaches the worker and is a miss of its own kind.
    wait_for_report(&worker.stats, "wake-ups counted as paused", |report| {
        report.wake_ups_paused >= 20
    })
    .await;
    assert_eq!(
        jobs_by_state(&setup.pool, &ids).await,
        vec![("QUEUED".to_owned(), 0, 20)],
        "{broker:?}: a paused queue claimed"
    );
    assert_eq!(runs.total(), 0);

    // Resuming wakes the waiting jobs itself (no reconciler runs here).
    jobwire_core::set_queue_paused(&setup.pool, &setup.queue, false)
        .await
        .unwrap();
    wait_for_all_finished(&setup.pool, &ids, Duration::from_secs(30))
        .await
        .unwrap();
    let report = worker.stop().await;
    relay.stop().await;
    assert_eq!(runs.total(), 20, "{broker:?}");
    assert_eq!(runs.more_than_once(), 0);
    assert_eq!(report.claimed, 20, "{report:?}");
    assert_eq!(report.safety_net_claims, 0, "{report:?}");
}

async fn a_wake_up_for_another_queues_job_claims_nothing(
    connect: PgConnectOptions,
    broker: Broker,
) {
    let setup = Setup::new(connect, broker).await;
    let runs = Runs::default();
    let transport = setup.transport().await;
    let worker = setup.start_worker(registry(&runs), transport.clone(), setup.worker_config(8));
    // A PostgreSQL-path queue with no worker of its own.
    let other = jobwire_core::enqueue(
        &setup.pool,
        &NewJob::new("counted", json!({})).with_queue(format!("{}-other", setup.queue)),
    )
    .await
    .unwrap()
    .job_id;
    // A wake-up for it, mis-routed onto this worker's topic.
    let mut headers = jobwire_transport::Headers::new();
    headers.insert(header::OUTBOX_ID.into(), "3000000".into());
    headers.insert(header::JOB_ID.into(), other.to_string());
    let results = transport
        .publish(&[Envelope {
            outbox_id: 3_000_000,
            topic: setup.topic.clone(),
            key: Some(other.to_string()),
            payload: json!({ "job_id": other }).to_string().into_bytes(),
            headers,
        }])
        .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    wait_for_report(&worker.stats, "the mis-routed wake-up", |report| {
        report.wake_ups_other_queue >= 1
    })
    .await;
    let report = worker.stop().await;
    assert_eq!(report.claimed, 0, "{broker:?}: {report:?}");
    assert_eq!(runs.total(), 0);
    assert_eq!(
        jobs_by_state(&setup.pool, &[other]).await,
        vec![("QUEUED".to_owned(), 0, 1)]
    );
}

/// A transport whose publishes succeed and go nowhere: the broker path cut.
struct Swallowing(Arc<dyn Transport>);

#[async_trait]
impl Transport for Swallowing {
    fn name(&self) -> &'static str {
        "swallowing"
    }

    fn address(&self) -> String {
        self.0.address()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Result<(), PublishError>> {
        batch.iter().map(|_| Ok(())).collect()
    }

    async fn subscribe(
        &self,
        topic: &str,
        options: &SubscribeOptions,
    ) -> Result<Box<dyn Subscriber>, TransportError> {
        self.0.subscribe(topic, options).await
    }

    async fn close(&self) -> Result<(), TransportError> {
        self.0.close().await
    }
}

async fn the_safety_net_runs_jobs_whose_wake_ups_are_lost(
    connect: PgConnectOptions,
    broker: Broker,
) {
    let setup = Setup::new(connect, broker).await;
    let runs = Runs::default();
    let transport = setup.transport().await;
    // The relay "publishes" every wake-up into the void; no reconciler runs.
    let relay = setup
        .start_relay(Arc::new(Swallowing(transport.clone())))
        .await;
    let config = WorkerConfig {
        safety_net_after: Some(Duration::from_secs(1)),
        safety_net_interval: Duration::from_millis(200),
        ..setup.worker_config(8)
    };
    let worker = setup.start_worker(registry(&runs), transport.clone(), config);
    let ids = setup.enqueue_counted(30).await;
    wait_for_all_finished(&setup.pool, &ids, WAIT)
        .await
        .unwrap();
    let report = worker.stop().await;
    let relayed = relay.stop().await;
    assert!(relayed.published >= 30, "{relayed:?}");
    assert_eq!(
        report.wake_ups, 0,
        "{broker:?}: nothing came through the broker"
    );
    assert_eq!(report.safety_net_claims, 30, "{report:?}");
    assert_eq!(runs.total(), 30);
    assert_eq!(runs.more_than_once(), 0);
}

/// A capped tenant on a broker queue: its waiting jobs get a wake-up only
/// as a slot frees, and the finish that frees it wakes the next one itself
/// (no reconciler runs; the safety net would wait ten minutes), one freed
/// slot at a time. A wake-up that arrives while the tenant is at its cap
/// (as a reconciler's re-wake could) is acknowledged as a `capped` miss:
/// counted once, not handed back to come again.
async fn a_capped_tenants_freed_slot_wakes_its_next_job(connect: PgConnectOptions, broker: Broker) {
    const CAP: usize = 2;
    const JOBS: usize = 6;
    let setup = Setup::new(connect, broker).await;
    jobwire_core::set_tenant_cap(&setup.pool, &setup.queue, None, Some(CAP as u32))
        .await
        .unwrap();
    // Each job's handler waits for a permit the test hands out; how many
    // ran at once is kept.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let runs = Runs::default();
    let mut registry = HandlerRegistry::new();
    registry.register("gated", {
        let (gate, running, most, runs) =
            (gate.clone(), running.clone(), most.clone(), runs.clone());
        move |ctx: JobContext| {
            let (gate, running, most, runs) =
                (gate.clone(), running.clone(), most.clone(), runs.clone());
            async move {
                *runs.0.lock().unwrap().entry(ctx.job_id()).or_default() += 1;
                most.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                gate.acquire().await.unwrap().forget();
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        }
    });
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| setup.job("gated", json!({ "i": i })).with_tenant("A"))
        .collect();
    let ids = jobwire_test_support::enqueue_ids(&setup.pool, &jobs)
        .await
        .unwrap();
    let transport = setup.transport().await;
    let relay = setup.start_relay(transport.clone()).await;
    let config = WorkerConfig {
        safety_net_after: Some(Duration::from_secs(600)),
        ..setup.worker_config(8)
    };
    let worker = setup.start_worker(registry, transport.clone(), config);
    let started = |n: usize| {
        let runs = runs.clone();
        async move {
            let deadline = tokio::time::Instant::now() + WAIT;
            while runs.total() < n as u32 {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{broker:?}: {} of {n} jobs started",
                    runs.total()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    started(CAP).await;

    // A wake-up for a waiting job while the tenant is at its cap.
    let waiting = *ids
        .iter()
        .find(|id| !runs.0.lock().unwrap().contains_key(id))
        .unwrap();
    let mut headers = jobwire_transport::Headers::new();
    headers.insert(header::OUTBOX_ID.into(), "3000000".into());
    let published = transport
        .publish(&[Envelope {
            outbox_id: 3_000_000,
            topic: setup.topic.clone(),
            key: Some(waiting.to_string()),
            payload: json!({ "job_id": waiting }).to_string().into_bytes(),
            headers,
        }])
        .await;
    assert!(published.iter().all(Result::is_ok), "{published:?}");
    wait_for_report(&worker.stats, "a capped wake-up", |report| {
        report.wake_ups_capped >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        worker.stats.report().wake_ups_capped,
        1,
        "{broker:?}: a capped wake-up came again"
    );
    assert_eq!(runs.total(), CAP as u32, "{broker:?}: ran past the cap");

    // Each freed slot starts the next job.
    for next in CAP + 1..=JOBS {
        gate.add_permits(1);
        started(next).await;
    }
    gate.add_permits(JOBS);
    wait_for_all_finished(&setup.pool, &ids, Duration::from_secs(60))
        .await
        .unwrap();
    let report = worker.stop().await;
    relay.stop().await;
    assert!(
        most.load(Ordering::SeqCst) <= CAP,
        "{broker:?}: {most:?} at once"
    );
    assert_eq!(runs.total(), JOBS as u32);
    assert_eq!(runs.more_than_once(), 0);
    assert_eq!(report.safety_net_claims, 0, "{report:?}");
    assert_eq!(report.wake_ups_capped, 1, "{report:?}");
}

/// A worker that cannot subscribe at all (its broker refuses it: here a
/// port nothing listens on, as a mistyped address would be) still runs the
/// queue's jobs through the safety net while it retries: its subscribe loop
/// used to retry without ever looking at the table.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_safety_net_runs_jobs_while_the_broker_refuses_the_worker(
    _options: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let setup = Setup::new(connect, Broker::Rabbitmq).await;
    let runs = Runs::default();
    let unreachable: Arc<dyn Transport> = Arc::new(RabbitTransport::new(RabbitConfig::new(
        "amqp://guest:guest@127.0.0.1:1/%2f",
    )));
    let config = WorkerConfig {
        safety_net_after: Some(Duration::from_secs(1)),
        safety_net_interval: Duration::from_millis(200),
        ..setup.worker_config(4)
    };
    let worker = setup.start_worker(registry(&runs), unreachable, config);
    let ids = setup.enqueue_counted(10).await;
    wait_for_all_finished(&setup.pool, &ids, WAIT)
        .await
        .unwrap();
    let report = worker.stop().await;
    assert_eq!(report.wake_ups, 0, "{report:?}");
    assert_eq!(report.safety_net_claims, 10, "{report:?}");
    assert_eq!(runs.total(), 10);
    assert_eq!(runs.more_than_once(), 0);
}

macro_rules! broker_scenarios {
    ($module:ident, $broker:expr) => {
        mod $module {
            use super::*;

            #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
            async fn volume_runs_every_job_exactly_once(
                _options: PgPoolOptions,
                connect: PgConnectOptions,
            ) {
                super::volume_runs_every_job_exactly_once(connect, $broker).await;
            }

            #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
            async fn retries_poison_and_cancel(_options: PgPoolOptions, connect: PgConnectOptions) {
                super::retries_poison_and_cancel(connect, $broker).await;
            }

            #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
            async fn duplicate_stale_and_garbage_wake_ups_run_nothing(
                _options: PgPoolOptions,
                connect: PgConnectOptions,
            ) {
                super::duplicate_stale_and_garbage_wake_ups_run_nothing(connect, $broker).await;
            }

            #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
            async fn lost_wake_ups_are_recreated_by_the_reconciler(
                _options: PgPoolOptions,
                connect: PgConnectOptions,
            ) {
                super::lost_wake_ups_are_recreated_by_the_reconciler(connect, $broker).await;
            }

            #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
            async fn effects_happen_once_across_crashes_and_duplicates(
                _options: PgPoolOptions,
                connect: PgConnectOptions,
            ) {
                super::effects_happen_once_across_crashes_and_duplicates(connect, $broker).await;
            }

            #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
            async fn a_paused_queue_claims_nothing_until_resumed(
                _options: PgPoolOptions,
                connect: PgConnectOptions,
            ) {
                super::a_paused_queue_claims_nothing_until_resumed(connect, $broker).await;
            }

            #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
            async fn a_wake_up_for_another_queues_job_claims_nothing(
                _options: PgPoolOptions,
                connect: PgConnectOptions,
            ) {
                super::a_wake_up_for_another_queues_job_claims_nothing(connect, $broker).await;
            }

            #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
            async fn a_capped_tenants_freed_slot_wakes_its_next_job(
                _options: PgPoolOptions,
                connect: PgConnectOptions,
            ) {
                super::a_capped_tenants_freed_slot_wakes_its_next_job(connect, $broker).await;
            }

            #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
            async fn the_safety_net_runs_jobs_whose_wake_ups_are_lost(
                _options: PgPoolOptions,
                connect: PgConnectOptions,
            ) {
                super::the_safety_net_runs_jobs_whose_wake_ups_are_lost(connect, $broker).await;
            }
        }
    };
}

broker_scenarios!(memory, Broker::Memory);
broker_scenarios!(rabbitmq, Broker::Rabbitmq);
broker_scenarios!(sqs, Broker::Sqs);
broker_scenarios!(kafka, Broker::Kafka);

/// The same registry (the same handler code) on the PostgreSQL path.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_same_handlers_run_on_the_postgres_path(pool: PgPool) {
    let runs = Runs::default();
    let jobs: Vec<NewJob> = (0..100)
        .map(|i| NewJob::new("counted", json!({ "i": i })).with_queue("pg"))
        .chain([NewJob::new("fail_times", json!({"times": 1})).with_queue("pg")])
        .collect();
    let ids: Vec<Uuid> = jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    let config = jobwire_test_support::test_worker_config("pg", 8);
    let maintenance = MaintenanceConfig {
        reconciler: None,
        ..test_maintenance()
    };
    let mut worker = Node::new(pool.clone())
        .with_worker(Worker::new(pool.clone(), registry(&runs), config))
        .with_maintenance(maintenance)
        .start()
        .unwrap();
    wait_for_all_finished(&pool, &ids, WAIT).await.unwrap();
    worker.stop().await.unwrap();
    assert_eq!(runs.total(), 100);
    let states = jobs_by_state(&pool, &ids).await;
    assert_eq!(
        states,
        vec![
            ("SUCCEEDED".to_owned(), 1, 100),
            ("SUCCEEDED".to_owned(), 2, 1)
        ]
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_broker_queue_without_a_transport_is_refused(pool: PgPool) {
    jobwire_core::set_queue_dispatch(&pool, "remote", &Dispatch::Broker { topic: "t".into() })
        .await
        .unwrap();
    let config = jobwire_test_support::test_worker_config("remote", 2);
    let err = Worker::new(pool, HandlerRegistry::new(), config)
        .run(CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("transport"), "{err}");
}

/// A worker whose broker connection drops mid-run reconnects by itself and
/// every job still runs exactly once (RabbitMQ through a proxy the test cuts).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_worker_reconnects_after_losing_the_broker(
    _options: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let setup = Setup::new(connect, Broker::Rabbitmq).await;
    let runs = Runs::default();
    let proxy = jobwire_test_support::FlakyProxy::start("127.0.0.1:5672", true)
        .await
        .unwrap();
    let mut via_proxy = RabbitConfig::new(format!("amqp://guest:guest@{}/%2f", proxy.addr));
    via_proxy.timeout = Duration::from_secs(3);
    let worker_transport: Arc<dyn Transport> = Arc::new(RabbitTransport::new(via_proxy));
    let worker = setup.start_worker(registry(&runs), worker_transport, setup.worker_config(8));
    let relay = setup.start_relay(setup.transport().await).await;

    let mut ids = setup.enqueue_counted(100).await;
    wait_for_all_finished(&setup.pool, &ids, WAIT)
        .await
        .unwrap();

    // The connection drops; jobs enqueued meanwhile wait on the broker.
    proxy.set_up(false);
    let second: Vec<NewJob> = (0..100)
        .map(|i| setup.job("counted", json!({ "j": i })))
        .collect();
    ids.extend(
        jobwire_core::enqueue_many(&setup.pool, &second)
            .await
            .unwrap()
            .into_iter()
            .map(|job| job.job_id),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.set_up(true);
    wait_for_all_finished(&setup.pool, &ids, WAIT)
        .await
        .unwrap();
    worker.stop().await;
    relay.stop().await;
    assert_eq!(runs.total(), 200);
    assert_eq!(runs.more_than_once(), 0);
    assert_eq!(
        jobs_by_state(&setup.pool, &ids).await,
        vec![("SUCCEEDED".to_owned(), 1, 200)]
    );
}
