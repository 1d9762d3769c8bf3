//! The outbox: write rows as a service with its own outbox would, receive
//! what a relay published, count what is left.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Result, bail};
use sqlx::PgPool;

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
    let mut distinct = HashSet::new();
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
