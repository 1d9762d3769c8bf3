//! The machine and database settings the numbers were taken on.

use std::time::Instant;

use anyhow::Result;
use jobwire_relay::RelayConfig;
use serde::Serialize;
use sqlx::PgPool;

/// The machine and database settings the numbers were taken on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Environment {
    /// CPU cores.
    pub cores: usize,
    /// CPU model, where the system says.
    pub cpu: String,
    /// PostgreSQL version.
    pub postgres: String,
    /// `synchronous_commit`.
    pub synchronous_commit: String,
    /// `fsync`.
    pub fsync: String,
    /// `wal_sync_method`.
    pub wal_sync_method: String,
    /// `autovacuum`: with it off, nothing vacuums or analyzes the tables
    /// between runs but the bench's own clean-up, and the flat-cost figures
    /// do not hold for a deployment.
    pub autovacuum: String,
    /// One durable single-row commit, measured (median of 200 in a row):
    /// what one job state change per commit would cost.
    pub durable_commit_ms: f64,
    /// Debug or release build of the harness.
    pub build: &'static str,
    /// Whether Prometheus metrics were recorded (`--metrics`).
    pub metrics: bool,
    /// Outbox rows per relay pass on the broker paths.
    pub relay_batch_size: usize,
    /// Relay drain tasks on the broker paths.
    pub relay_concurrency: usize,
    /// With a Kafka path in the run: how often (ms) its topics were trimmed
    /// below the consumer group's committed offsets, 0 if never. `None`
    /// without a Kafka path.
    pub kafka_trim_ms: Option<u64>,
}

/// Read the environment.
pub async fn environment(pool: &PgPool) -> Result<Environment> {
    let setting = |name: &'static str| async move {
        sqlx::query_scalar::<_, String>("SELECT setting FROM pg_settings WHERE name = $1")
            .bind(name)
            .fetch_one(pool)
            .await
    };
    Ok(Environment {
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        cpu: std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("model name"))
                    .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
            })
            .unwrap_or_else(|| "unknown".into()),
        postgres: setting("server_version").await?,
        synchronous_commit: setting("synchronous_commit").await?,
        fsync: setting("fsync").await?,
        wal_sync_method: setting("wal_sync_method").await?,
        autovacuum: setting("autovacuum").await?,
        durable_commit_ms: durable_commit_ms(pool).await?,
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        metrics: false,
        relay_batch_size: RelayConfig::default().batch_size,
        relay_concurrency: RelayConfig::default().concurrency,
        kafka_trim_ms: None,
    })
}

/// Median time of one single-row commit, 200 in a row on one connection.
async fn durable_commit_ms(pool: &PgPool) -> Result<f64> {
    let mut conn = pool.acquire().await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS bench_commit_probe (at timestamptz NOT NULL)")
        .execute(&mut *conn)
        .await?;
    let mut times = Vec::with_capacity(200);
    for _ in 0..200 {
        let started = Instant::now();
        sqlx::query("INSERT INTO bench_commit_probe VALUES (now())")
            .execute(&mut *conn)
            .await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    sqlx::query("TRUNCATE bench_commit_probe")
        .execute(&mut *conn)
        .await?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
