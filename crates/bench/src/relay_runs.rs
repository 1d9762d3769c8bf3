//! The relay on its own, with no jobs and no worker behind it: how fast it
//! drains a backlog of outbox rows into a broker, and how long a row waits
//! between its insert and its delivery at a steady rate.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use jobwire_relay::{Relay, RelayConfig};
use jobwire_server::Node;
use jobwire_transport::{SubscribeOptions, Transport};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::cost::{cost, counters};
use crate::harness::{progress_bar, run_pool};
use crate::quantile::percentile;
use crate::{BenchConfig, DatabaseCost, PathUnderTest};

/// The relay draining a backlog of outbox rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RelayRun {
    /// Rows in the backlog.
    pub rows: usize,
    /// Relay drain tasks.
    pub concurrency: usize,
    /// Rows per pass.
    pub batch_size: usize,
    /// Wall time from start to an empty backlog.
    pub seconds: f64,
    /// Rows published (broker-confirmed) and deleted per second.
    pub rows_per_second: f64,
    /// Database cost per row.
    pub cost: DatabaseCost,
}

/// Insert → delivered to a subscriber, for outbox rows written one per
/// transaction at a steady rate. This bounds the outbox lag (insert →
/// confirmed publish) from above: it adds the broker's own delivery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct OutboxLag {
    /// Rows written (and delivered).
    pub rows: usize,
    /// Arrival rate, rows/s.
    pub rate: u32,
    /// Median, ms.
    pub p50_ms: f64,
    /// 95th percentile, ms.
    pub p95_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Worst, ms.
    pub max_ms: f64,
}

fn fresh_topic(path: &PathUnderTest, run: &str) -> String {
    let suffix = &Uuid::new_v4().simple().to_string()[..10];
    format!("bench-{}-{run}-{suffix}", path.name)
}

fn relay_config(config: &BenchConfig) -> RelayConfig {
    RelayConfig {
        batch_size: config.relay_batch_size,
        concurrency: config.relay_concurrency,
        poll_interval: Duration::from_millis(200),
        ..RelayConfig::default()
    }
}

/// Drop what the run left on the broker, where the broker can.
async fn clean_up(transport: &dyn Transport, topic: &str) {
    if let Err(err) = transport.purge(topic).await {
        tracing::debug!(%topic, error = %err, "bench: left the topic as it is");
    }
}

/// The relay alone: `path.relay_rows` rows written up front, then the
/// relay started; rows/s until the backlog is gone. `None` for the
/// PostgreSQL path, which has no relay.
pub async fn relay_alone(
    pool: &PgPool,
    path: &PathUnderTest,
    config: &BenchConfig,
) -> Result<Option<RelayRun>> {
    let Some(transport) = &path.transport else {
        return Ok(None);
    };
    let topic = fresh_topic(path, "relay");
    let rows = path.relay_rows;
    sqlx::query(
        "INSERT INTO job_outbox (topic, payload)
         SELECT $1, jsonb_build_object('i', n, 'filler', repeat('x', $3))
         FROM generate_series(1, $2) AS n",
    )
    .bind(&topic)
    .bind(rows as i64)
    .bind(config.payload_bytes as i32)
    .execute(pool)
    .await?;

    let work = run_pool(pool, config).await?;
    let before = counters(pool).await?;
    let started = Instant::now();
    let relay_config = RelayConfig {
        lane: jobwire_relay::TopicLane::Only(vec![topic.clone()]),
        ..relay_config(config)
    };
    let mut node = Node::new(work.clone())
        .with_relay(Relay::new(work.clone(), transport.clone(), relay_config))
        .start()?;
    let bar = progress_bar(config, rows, format!("{} relay alone", path.name));
    let deadline = started + config.timeout;
    loop {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM job_outbox WHERE topic = $1")
            .bind(&topic)
            .fetch_one(pool)
            .await?;
        bar.set_position(rows as u64 - left as u64);
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            node.stop().await?;
            bail!(
                "{} relay alone: {left} of {rows} rows left after {:?}",
                path.name,
                config.timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    node.stop().await?;
    crate::harness::close_run_pool(pool, work).await?;
    let after = counters(pool).await?;
    clean_up(transport.as_ref(), &topic).await;
    Ok(Some(RelayRun {
        rows,
        concurrency: config.relay_concurrency,
        batch_size: config.relay_batch_size,
        seconds,
        rows_per_second: rows as f64 / seconds,
        cost: cost(before, after, rows),
    }))
}

fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as i64)
}

/// One outbox row (its own transaction) that carries the time it was sent.
async fn write_timed_row(pool: &PgPool, topic: &str) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO job_outbox (topic, payload) VALUES ($1, jsonb_build_object('sent_us', $2::bigint))",
    )
    .bind(topic)
    .bind(unix_micros())
    .execute(pool)
    .await?;
    Ok(())
}

/// Outbox rows at `path.lag_rate` for `config.rate_duration`, one per
/// transaction (open loop), each carrying its insert time; a subscriber
/// records when each arrives. `None` for the PostgreSQL path.
pub async fn outbox_lag(
    pool: &PgPool,
    path: &PathUnderTest,
    config: &BenchConfig,
) -> Result<Option<OutboxLag>> {
    let Some(transport) = &path.transport else {
        return Ok(None);
    };
    let topic = fresh_topic(path, "lag");
    let options = SubscribeOptions {
        group: format!("bench-{}", Uuid::new_v4().simple()),
        prefetch: 1000,
        ..SubscribeOptions::default()
    };
    let mut subscriber = transport.subscribe(&topic, &options).await?;
    let work = run_pool(pool, config).await?;
    let mut node = Node::new(work.clone())
        .with_relay(Relay::new(
            work.clone(),
            transport.clone(),
            relay_config(config),
        ))
        .start()?;
    // One row through first: the subscriber (a Kafka group member, say)
    // is assigned and reading before the clock runs.
    write_timed_row(&work, &topic).await?;
    let warm_up = subscriber
        .receive(1, Duration::from_secs(30))
        .await
        .with_context(|| format!("{} outbox lag: warm-up", path.name))?;
    if warm_up.is_empty() {
        node.stop().await?;
        bail!("{} outbox lag: the warm-up row never arrived", path.name);
    }
    subscriber
        .ack(&warm_up.into_iter().map(|d| d.receipt).collect::<Vec<_>>())
        .await?;

    let total =
        (u64::from(path.lag_rate) * config.rate_duration.as_millis() as u64 / 1000) as usize;
    let producer = {
        let (work, topic, rate) = (work.clone(), topic.clone(), path.lag_rate);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut inserts = tokio::task::JoinSet::new();
            for _ in 0..total {
                ticker.tick().await;
                let (work, topic) = (work.clone(), topic.clone());
                inserts.spawn(async move { write_timed_row(&work, &topic).await });
            }
            while let Some(done) = inserts.join_next().await {
                done??;
            }
            anyhow::Ok(())
        })
    };

    let bar = progress_bar(config, total, format!("{} outbox lag", path.name));
    let mut lags_ms = Vec::with_capacity(total);
    let mut seen = std::collections::HashSet::new();
    let deadline = Instant::now() + config.rate_duration + config.timeout;
    while seen.len() < total {
        if Instant::now() > deadline {
            node.stop().await?;
            bail!(
                "{} outbox lag: {} of {total} rows arrived",
                path.name,
                seen.len()
            );
        }
        let deliveries = subscriber.receive(1000, Duration::from_millis(200)).await?;
        let arrived = unix_micros();
        let mut receipts = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            let sent = serde_json::from_slice::<serde_json::Value>(&delivery.payload)
                .ok()
                .and_then(|body| body.get("sent_us").and_then(|v| v.as_i64()));
            if let (Some(sent), Some(id)) = (sent, delivery.outbox_id())
                && seen.insert(id)
            {
                lags_ms.push((arrived - sent) as f64 / 1000.0);
            }
            receipts.push(delivery.receipt);
        }
        subscriber.ack(&receipts).await?;
        bar.set_position(seen.len() as u64);
    }
    bar.finish_and_clear();
    producer.await??;
    node.stop().await?;
    subscriber.close().await?;
    work.close().await;
    clean_up(transport.as_ref(), &topic).await;
    Ok(Some(OutboxLag {
        rows: total,
        rate: path.lag_rate,
        p50_ms: percentile(&mut lags_ms, 0.50),
        p95_ms: percentile(&mut lags_ms, 0.95),
        p99_ms: percentile(&mut lags_ms, 0.99),
        max_ms: percentile(&mut lags_ms, 1.0),
    }))
}
