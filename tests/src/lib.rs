//! Shared helpers for the workspace-level integration tests. Every test runs
//! against a real PostgreSQL (a fresh database per test via `#[sqlx::test]`).

use std::time::Duration;

use anyhow::{Result, bail};
use jobwire_consumer::maintenance::SweeperConfig;
use jobwire_consumer::{QueueConfig, RuntimeConfig, WorkerConfig};
use jobwire_core::{JobState, JobStatus};
use sqlx::PgPool;
use uuid::Uuid;

/// Poll the table until `job_id` satisfies `done`, or fail after `timeout`.
/// (The table is the truth; polling it is how an operator would check.)
pub async fn wait_for_job(
    pool: &PgPool,
    job_id: Uuid,
    timeout: Duration,
    done: impl Fn(&JobStatus) -> bool,
) -> Result<JobStatus> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let status = jobwire_core::job_status(pool, job_id).await?;
        if done(&status) {
            return Ok(status);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("job {job_id} did not reach the expected state within {timeout:?}: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until `job_id` is in `state`.
pub async fn wait_for_state(
    pool: &PgPool,
    job_id: Uuid,
    state: JobState,
    timeout: Duration,
) -> Result<JobStatus> {
    wait_for_job(pool, job_id, timeout, |status| status.state == state).await
}

/// Wait until every job in `ids` is terminal.
pub async fn wait_for_all_finished(pool: &PgPool, ids: &[Uuid], timeout: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let unfinished: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE job_id = ANY($1) AND finished_at IS NULL",
        )
        .bind(ids)
        .fetch_one(pool)
        .await?;
        if unfinished == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "{unfinished} of {} jobs unfinished after {timeout:?}",
                ids.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Make the job's lease run out now, as if its holder had gone silent for the
/// whole lease. Tests use it instead of sleeping through a lease.
pub async fn expire_lease(pool: &PgPool, job_id: Uuid) -> Result<()> {
    let changed = sqlx::query(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE job_id = $1 AND lease_owner IS NOT NULL",
    )
    .bind(job_id)
    .execute(pool)
    .await?
    .rows_affected();
    if changed != 1 {
        bail!("job {job_id} holds no lease to expire");
    }
    Ok(())
}

/// Outbox rows whose payload names `job_id`.
pub async fn wake_ups_for(pool: &PgPool, job_id: Uuid) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM job_outbox WHERE payload->>'job_id' = $1::text")
            .bind(job_id)
            .fetch_one(pool)
            .await?,
    )
}

/// Handler options with retries a test can wait for: 100 ms backoff, at
/// most 400 ms.
pub fn fast_options() -> jobwire_consumer::HandlerOptions {
    jobwire_consumer::HandlerOptions {
        backoff: jobwire_core::Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_millis(400),
            jitter_ratio: 0.1,
        },
        ..jobwire_consumer::HandlerOptions::default()
    }
}

/// A worker config for tests: one queue, short lease and poll, a sweeper.
pub fn test_worker_config(queue: &str, concurrency: usize) -> WorkerConfig {
    WorkerConfig {
        runtime: RuntimeConfig {
            lease: Duration::from_millis(1500),
            cancel_grace: Duration::from_millis(500),
            ..RuntimeConfig::default()
        },
        queues: vec![QueueConfig::new(queue, concurrency)],
        poll_interval: Duration::from_millis(100),
        shutdown_timeout: Duration::from_secs(5),
        sweeper: Some(SweeperConfig {
            interval: Duration::from_millis(200),
            ..SweeperConfig::default()
        }),
        retention: None,
        ..WorkerConfig::default()
    }
}

/// Broker addresses for tests, from the environment, defaulting to the local
/// services `scripts/services` starts.
pub mod brokers {
    /// RabbitMQ URL (`AMQP_URL`).
    pub fn amqp_url() -> String {
        std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
    }

    /// SQS endpoint (`SQS_ENDPOINT`).
    pub fn sqs_endpoint() -> String {
        std::env::var("SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
    }

    /// Kafka bootstrap servers (`KAFKA_BOOTSTRAP`).
    pub fn kafka_bootstrap() -> String {
        std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into())
    }
}

/// Insert `count` outbox rows on `topic`, as a service with its own outbox
/// would (no jobs row behind them), keyed round-robin over `keys` keys.
/// Returns their ids in insertion order.
pub async fn write_outbox_rows(
    pool: &PgPool,
    topic: &str,
    count: i64,
    keys: i64,
) -> Result<Vec<i64>> {
    Ok(sqlx::query_scalar(
        "INSERT INTO job_outbox (topic, message_key, payload, headers)
         SELECT $1, 'key-' || (n % $3), jsonb_build_object('order', n), '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}'::jsonb
         FROM generate_series(1, $2) AS n
         ORDER BY n
         RETURNING id",
    )
    .bind(topic)
    .bind(count)
    .bind(keys.max(1))
    .fetch_all(pool)
    .await?)
}

/// Receive everything on `subscriber` until `expected` distinct outbox ids
/// have arrived (or `timeout`), acknowledging as it goes. Returns every
/// outbox id received, duplicates included, in arrival order.
pub async fn drain_subscriber(
    subscriber: &mut dyn jobwire_transport::Subscriber,
    expected: usize,
    timeout: Duration,
) -> Result<Vec<(Option<String>, i64)>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut received = Vec::new();
    let mut distinct = std::collections::HashSet::new();
    while distinct.len() < expected {
        if tokio::time::Instant::now() > deadline {
            bail!(
                "only {} of {expected} messages arrived within {timeout:?}",
                distinct.len()
            );
        }
        let batch = subscriber.receive(500, Duration::from_secs(2)).await?;
        for delivery in &batch {
            let Some(id) = delivery.outbox_id() else {
                bail!("a delivery without an outbox id: {delivery:?}");
            };
            distinct.insert(id);
            received.push((delivery.key.clone(), id));
        }
        let receipts: Vec<_> = batch.iter().map(|d| d.receipt.clone()).collect();
        subscriber.ack(&receipts).await?;
    }
    // Anything still arriving is a duplicate worth counting.
    loop {
        let batch = subscriber.receive(500, Duration::from_secs(1)).await?;
        if batch.is_empty() {
            break;
        }
        for delivery in &batch {
            received.push((delivery.key.clone(), delivery.outbox_id().unwrap_or(-1)));
        }
        let receipts: Vec<_> = batch.iter().map(|d| d.receipt.clone()).collect();
        subscriber.ack(&receipts).await?;
    }
    Ok(received)
}

/// Rows still in the outbox.
pub async fn outbox_len(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM job_outbox")
        .fetch_one(pool)
        .await?)
}

/// A TCP proxy in front of a real broker that the test can switch off and
/// on: switching off cuts every live connection and refuses new ones (they
/// are closed as soon as accepted). This is how tests take a broker away
/// from one client without stopping the broker other tests share.
pub struct FlakyProxy {
    /// Where clients connect.
    pub addr: std::net::SocketAddr,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: std::sync::Arc<std::sync::Mutex<tokio_util::sync::CancellationToken>>,
    accept: tokio::task::JoinHandle<()>,
}

impl FlakyProxy {
    /// Start a proxy to `upstream` (host:port), up or down.
    pub async fn start(upstream: &str, up: bool) -> Result<Self> {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(up));
        let cut = std::sync::Arc::new(std::sync::Mutex::new(
            tokio_util::sync::CancellationToken::new(),
        ));
        let upstream = upstream.to_owned();
        let (state_in, cut_in) = (state.clone(), cut.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if !state_in.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let token = cut_in.lock().unwrap().clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = token.cancelled() => {}
                    }
                });
            }
        });
        Ok(FlakyProxy {
            addr,
            up: state,
            cut,
            accept,
        })
    }

    /// Switch the proxy on or off.
    pub fn set_up(&self, up: bool) {
        self.up.store(up, std::sync::atomic::Ordering::SeqCst);
        if !up {
            let mut cut = self.cut.lock().unwrap();
            cut.cancel();
            *cut = tokio_util::sync::CancellationToken::new();
        }
    }
}

impl Drop for FlakyProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut.lock().unwrap().cancel();
    }
}

/// Enqueue `jobs` in one statement; their ids in order.
pub async fn enqueue_ids(pool: &PgPool, jobs: &[jobwire_core::NewJob]) -> Result<Vec<Uuid>> {
    Ok(jobwire_core::enqueue_many(pool, jobs)
        .await?
        .into_iter()
        .map(|job| job.job_id)
        .collect())
}
