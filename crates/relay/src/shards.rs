//! Per-key ordering: holding the key-shard advisory locks.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use jobwire_loop::{Outage, POLL_SPREAD, jittered, sleep};

/// Hold as many key-shard advisory locks as this relay can get, on one
/// session connection, retrying the others every few seconds (a relay that
/// dies releases its shards with its connection).
pub(crate) async fn hold_shards(
    pool: PgPool,
    shards: u32,
    held: Arc<tokio::sync::RwLock<Vec<i64>>>,
    shutdown: CancellationToken,
) {
    // From a lost or refused connection to the next that holds locks.
    let mut outage = Outage::new();
    while !shutdown.is_cancelled() {
        let mut connection = match pool.acquire().await {
            Ok(connection) => connection.detach(),
            Err(err) => {
                outage.failed();
                tracing::warn!(error = %err, "cannot get a connection for shard locks");
                if sleep(Duration::from_secs(1), &shutdown)
                    .await
                    .is_cancelled()
                {
                    return;
                }
                continue;
            }
        };
        let mut mine = Vec::new();
        loop {
            let mut lost = false;
            for shard in 0..i64::from(shards) {
                if mine.contains(&shard) {
                    continue;
                }
                match sqlx::query_scalar::<_, bool>(include_str!("../sql/try_lock_shard.sql"))
                    .bind(shard)
                    .fetch_one(&mut connection)
                    .await
                {
                    Ok(true) => mine.push(shard),
                    Ok(false) => {}
                    Err(err) => {
                        outage.failed();
                        tracing::warn!(error = %err, "shard lock connection lost");
                        lost = true;
                        break;
                    }
                }
            }
            if !lost && let Some(ended) = outage.succeeded() {
                tracing::info!(shards = mine.len(), "holding shard locks again {ended}");
            }
            *held.write().await = if lost { Vec::new() } else { mine.clone() };
            if lost {
                break;
            }
            let retry = jittered(Duration::from_secs(2), POLL_SPREAD);
            if sleep(retry, &shutdown).await.is_cancelled() {
                return;
            }
        }
    }
}
