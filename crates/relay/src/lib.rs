//! jobwire-relay: drains the transactional outbox (`job_outbox`) into a broker.
//!
//! Each pass claims due rows in a batch (`FOR UPDATE SKIP LOCKED`), publishes
//! them through a [`Transport`] (which returns only once the broker confirmed),
//! deletes the published rows and records failures, all in the transaction
//! that holds the row locks. So:
//! - several relays may drain one table at once (they skip each other's rows);
//! - a crash between publish and commit publishes those rows again:
//!   duplicates are possible, loss is not;
//! - a row that cannot be published (too large, bad destination) is retried
//!   a bounded number of times, then moved to `job_outbox_dead` with its
//!   error, and never blocks the rows behind it;
//! - while the broker is down the relay backs off with jitter and resumes by
//!   itself, without counting the outage against any row.
//!
//! The relay needs no jobs row behind a message: any service that writes rows
//! of the `job_outbox` shape is served.
#![warn(missing_docs)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use jobwire_transport::{Envelope, Headers, PublishError, Transport, header};
use rand::Rng;
use serde::Serialize;
use sqlx::postgres::PgListener;
use sqlx::{PgConnection, PgPool};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The LISTEN/NOTIFY channel that announces new outbox rows.
pub const OUTBOX_CHANNEL: &str = "jobwire_outbox";

/// Maps outbox topics to broker destinations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicMap {
    /// Prepended to every topic without an explicit mapping.
    pub prefix: String,
    /// Explicit topic -> destination mappings.
    pub overrides: HashMap<String, String>,
}

impl TopicMap {
    /// The destination for an outbox topic.
    pub fn destination(&self, topic: &str) -> String {
        match self.overrides.get(topic) {
            Some(destination) => destination.clone(),
            None => format!("{}{topic}", self.prefix),
        }
    }
}

/// Whether rows of one key must be published in id order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrdering {
    /// Any order; any number of relays and drain tasks work in parallel.
    Unordered,
    /// Rows of one `message_key` are published in id order: keys are hashed
    /// into `shards`, and each shard is drained by one relay at a time (the
    /// holder of its advisory lock). A row that fails holds back the rows of
    /// its key behind it in the batch, which are published again after it.
    PerKey {
        /// Number of key shards (the most relays that can share the work).
        shards: u32,
    },
}

/// Which outbox topics one relay drains. A bulk backlog on one topic delays
/// every row behind it in a relay that drains all topics oldest first; a
/// dedicated lane (`Only` the urgent topics, beside a relay for `Except`
/// them) keeps urgent wake-ups from queueing behind bulk ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TopicLane {
    /// Every topic.
    #[default]
    All,
    /// Only these outbox topics.
    Only(Vec<String>),
    /// Every outbox topic except these.
    Except(Vec<String>),
}

/// Settings for [`Relay`]; `Default` gives sensible values.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayConfig {
    /// Most rows per pass (one transaction, one publish call).
    pub batch_size: usize,
    /// Parallel drain tasks in this process (unordered mode only).
    pub concurrency: usize,
    /// Poll fallback when no NOTIFY arrives (jittered by ±20 %).
    pub poll_interval: Duration,
    /// Attempts before a row that keeps failing is moved aside.
    pub max_attempts: i32,
    /// First pause while the broker is down; doubles up to `max_backoff`.
    pub min_backoff: Duration,
    /// Longest pause while the broker is down.
    pub max_backoff: Duration,
    /// Outbox topic -> broker destination.
    pub topics: TopicMap,
    /// Ordering mode.
    pub ordering: KeyOrdering,
    /// Which outbox topics this relay drains (unordered mode).
    pub lane: TopicLane,
    /// Longest a pass's transaction may sit idle (waiting on the broker)
    /// while it holds its rows; past it the database ends the session and
    /// the rows go to another relay.
    pub transaction_timeout: Duration,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            batch_size: 500,
            concurrency: 1,
            poll_interval: Duration::from_secs(1),
            max_attempts: 10,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
            topics: TopicMap::default(),
            ordering: KeyOrdering::Unordered,
            lane: TopicLane::All,
            transaction_timeout: Duration::from_secs(30),
        }
    }
}

impl RelayConfig {
    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), RelayError> {
        let fail = |reason: &str| Err(RelayError::Config(reason.to_owned()));
        if self.batch_size == 0 {
            return fail("batch_size must be at least 1");
        }
        if self.concurrency == 0 {
            return fail("concurrency must be at least 1");
        }
        if self.max_attempts < 1 {
            return fail("max_attempts must be at least 1");
        }
        if self.poll_interval.is_zero() || self.min_backoff.is_zero() {
            return fail("poll_interval and min_backoff must be positive");
        }
        if self.transaction_timeout < Duration::from_millis(100) {
            return fail("transaction_timeout must be at least 100 ms");
        }
        if let KeyOrdering::PerKey { shards } = self.ordering
            && shards == 0
        {
            return fail("per-key ordering needs at least one shard");
        }
        match (&self.lane, self.ordering) {
            (TopicLane::Only(topics), _) if topics.is_empty() => {
                return fail("a lane of only no topics would drain nothing");
            }
            (TopicLane::Only(_) | TopicLane::Except(_), KeyOrdering::PerKey { .. }) => {
                return fail("topic lanes work in unordered mode only");
            }
            _ => {}
        }
        Ok(())
    }
}

/// Why the relay could not run or a pass failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// Settings that cannot work.
    #[error("invalid relay configuration: {0}")]
    Config(String),
    /// The database failed (the pass is retried after a pause).
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// Counters of one relay.
#[derive(Debug, Default)]
pub struct RelayStats {
    passes: AtomicU64,
    published: AtomicU64,
    failed_attempts: AtomicU64,
    moved_aside: AtomicU64,
    broker_down: AtomicU64,
    database_errors: AtomicU64,
    largest_batch: AtomicU64,
}

/// A copy of [`RelayStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RelayReport {
    /// Passes that claimed at least one row.
    pub passes: u64,
    /// Rows published and deleted.
    pub published: u64,
    /// Failed publish attempts counted against rows.
    pub failed_attempts: u64,
    /// Rows moved to `job_outbox_dead`.
    pub moved_aside: u64,
    /// Passes where every row failed as unavailable (broker down).
    pub broker_down: u64,
    /// Database errors.
    pub database_errors: u64,
    /// The largest batch published in one pass.
    pub largest_batch: u64,
}

impl RelayStats {
    /// A copy of the counters.
    pub fn report(&self) -> RelayReport {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RelayReport {
            passes: get(&self.passes),
            published: get(&self.published),
            failed_attempts: get(&self.failed_attempts),
            moved_aside: get(&self.moved_aside),
            broker_down: get(&self.broker_down),
            database_errors: get(&self.database_errors),
            largest_batch: get(&self.largest_batch),
        }
    }

    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassOutcome {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows published (and deleted).
    pub published: usize,
    /// Rows whose attempt failed (still in the outbox, or moved aside).
    pub failed: usize,
    /// Rows moved aside.
    pub moved_aside: usize,
    /// Every claimed row failed as unavailable: the broker is down.
    pub broker_down: bool,
}

#[derive(sqlx::FromRow)]
struct OutboxRow {
    id: i64,
    topic: String,
    message_key: Option<String>,
    payload: String,
    headers: serde_json::Value,
    attempts: i32,
}

/// Drains `job_outbox` into a [`Transport`].
pub struct Relay {
    pool: PgPool,
    transport: Arc<dyn Transport>,
    config: RelayConfig,
    stats: Arc<RelayStats>,
}

impl Relay {
    /// A relay; nothing runs until [`Relay::run`] or [`Relay::drain_once`].
    pub fn new(pool: PgPool, transport: Arc<dyn Transport>, config: RelayConfig) -> Self {
        Relay {
            pool,
            transport,
            config,
            stats: Arc::new(RelayStats::default()),
        }
    }

    /// Live counters.
    pub fn stats(&self) -> Arc<RelayStats> {
        self.stats.clone()
    }

    fn envelope(&self, row: &OutboxRow) -> Envelope {
        let mut headers = Headers::new();
        if let serde_json::Value::Object(map) = &row.headers {
            for (name, value) in map {
                let text = match value {
                    serde_json::Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                headers.insert(name.clone(), text);
            }
        }
        headers
            .entry(header::CONTENT_TYPE.into())
            .or_insert_with(|| "application/json".into());
        headers.insert(header::OUTBOX_ID.into(), row.id.to_string());
        // Job wake-ups also carry the job and generation as headers, so a
        // consumer can route them without parsing the body.
        if headers.get(header::KIND).map(String::as_str) == Some("wake-up")
            && let Ok(body) = serde_json::from_str::<serde_json::Value>(&row.payload)
        {
            if let Some(job_id) = body.get("job_id").and_then(|v| v.as_str()) {
                headers.insert(header::JOB_ID.into(), job_id.to_owned());
            }
            if let Some(generation) = body.get("generation").and_then(|v| v.as_i64()) {
                headers.insert(header::GENERATION.into(), generation.to_string());
            }
        }
        Envelope {
            outbox_id: row.id,
            topic: self.config.topics.destination(&row.topic),
            key: row.message_key.clone(),
            payload: row.payload.clone().into_bytes(),
            headers,
        }
    }

    /// One pass over the rows due now (in `shards` when ordering by key).
    async fn pass(&self, shards: Option<&[i64]>) -> Result<PassOutcome, RelayError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(include_str!("../sql/transaction_timeout.sql"))
            .bind(format!("{}ms", self.config.transaction_timeout.as_millis()))
            .execute(&mut *tx)
            .await?;
        let rows: Vec<OutboxRow> = match (shards, self.config.ordering) {
            (Some(held), KeyOrdering::PerKey { shards }) => {
                sqlx::query_as(include_str!("../sql/claim_due_ordered.sql"))
                    .bind(self.config.batch_size as i64)
                    .bind(i64::from(shards))
                    .bind(held)
                    .fetch_all(&mut *tx)
                    .await?
            }
            _ => {
                let batch = self.config.batch_size as i64;
                match &self.config.lane {
                    TopicLane::All => {
                        sqlx::query_as(include_str!("../sql/claim_due.sql"))
                            .bind(batch)
                            .fetch_all(&mut *tx)
                            .await?
                    }
                    TopicLane::Only(topics) => {
                        sqlx::query_as(include_str!("../sql/claim_due_only.sql"))
                            .bind(batch)
                            .bind(topics)
                            .fetch_all(&mut *tx)
                            .await?
                    }
                    TopicLane::Except(topics) => {
                        sqlx::query_as(include_str!("../sql/claim_due_except.sql"))
                            .bind(batch)
                            .bind(topics)
                            .fetch_all(&mut *tx)
                            .await?
                    }
                }
            }
        };
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(PassOutcome::default());
        }
        let envelopes: Vec<Envelope> = rows.iter().map(|row| self.envelope(row)).collect();
        let results = self.transport.publish(&envelopes).await;
        let outcome = self.settle(&mut tx, &rows, results).await?;
        tx.commit().await?;

        self.stats.passes.fetch_add(1, Ordering::Relaxed);
        RelayStats::add(&self.stats.published, outcome.published);
        self.stats
            .largest_batch
            .fetch_max(outcome.published as u64, Ordering::Relaxed);
        if outcome.broker_down {
            self.stats.broker_down.fetch_add(1, Ordering::Relaxed);
        } else {
            RelayStats::add(&self.stats.failed_attempts, outcome.failed);
            RelayStats::add(&self.stats.moved_aside, outcome.moved_aside);
        }
        tracing::debug!(
            claimed = outcome.claimed,
            published = outcome.published,
            failed = outcome.failed,
            moved_aside = outcome.moved_aside,
            "relay pass"
        );
        Ok(outcome)
    }

    /// Turn publish results into deletes, failure counts and moves, inside
    /// the pass's transaction.
    async fn settle(
        &self,
        tx: &mut PgConnection,
        rows: &[OutboxRow],
        results: Vec<Result<(), PublishError>>,
    ) -> Result<PassOutcome, RelayError> {
        let mut outcome = PassOutcome {
            claimed: rows.len(),
            ..PassOutcome::default()
        };
        let broker_down = results
            .iter()
            .all(|result| matches!(result, Err(PublishError::Unavailable(_))));
        let ordered = matches!(self.config.ordering, KeyOrdering::PerKey { .. });
        let mut held_back_keys: HashSet<Option<&str>> = HashSet::new();
        let mut published = Vec::new();
        let (mut failed_ids, mut failed_errors, mut failed_delays) =
            (Vec::new(), Vec::new(), Vec::new());
        let (mut dead_ids, mut dead_errors) = (Vec::new(), Vec::new());
        for (row, result) in rows.iter().zip(results) {
            let key = row.message_key.as_deref();
            match result {
                Ok(()) if ordered && held_back_keys.contains(&key) => {
                    // An earlier row of this key failed: publish this one
                    // again after it, to keep the key's order.
                }
                Ok(()) => published.push(row.id),
                Err(err) => {
                    outcome.failed += 1;
                    if ordered {
                        held_back_keys.insert(key);
                    }
                    if broker_down {
                        continue; // an outage is no row's fault
                    }
                    let error = err.to_string();
                    tracing::warn!(outbox_id = row.id, topic = %row.topic, attempt = row.attempts + 1, %error, "publish failed");
                    if row.attempts + 1 >= self.config.max_attempts {
                        dead_ids.push(row.id);
                        dead_errors.push(error);
                    } else {
                        failed_ids.push(row.id);
                        failed_errors.push(error);
                        failed_delays.push(if ordered {
                            0
                        } else {
                            self.retry_delay(row.attempts + 1).as_millis() as i64
                        });
                    }
                }
            }
        }
        outcome.broker_down = broker_down;
        outcome.published = published.len();
        outcome.moved_aside = dead_ids.len();
        if !published.is_empty() {
            sqlx::query(include_str!("../sql/delete_published.sql"))
                .bind(&published)
                .execute(&mut *tx)
                .await?;
        }
        if !failed_ids.is_empty() {
            sqlx::query(include_str!("../sql/record_failures.sql"))
                .bind(&failed_ids)
                .bind(&failed_errors)
                .bind(&failed_delays)
                .execute(&mut *tx)
                .await?;
        }
        if !dead_ids.is_empty() {
            tracing::error!(rows = ?dead_ids, "outbox rows moved aside to job_outbox_dead after repeated failures");
            sqlx::query(include_str!("../sql/move_aside.sql"))
                .bind(&dead_ids)
                .bind(&dead_errors)
                .execute(&mut *tx)
                .await?;
        }
        Ok(outcome)
    }

    /// How long a row waits after its `attempt`-th failure.
    fn retry_delay(&self, attempt: i32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.clamp(1, 30) as u32 - 1);
        self.config
            .min_backoff
            .saturating_mul(factor)
            .min(self.config.max_backoff)
    }

    /// Publish everything due now, pass after pass, until a pass comes back
    /// short or the broker is down. (Unordered mode; for tests and tools.)
    pub async fn drain_once(&self) -> Result<PassOutcome, RelayError> {
        let mut total = PassOutcome::default();
        loop {
            let outcome = self.pass(None).await?;
            total.claimed += outcome.claimed;
            total.published += outcome.published;
            total.failed += outcome.failed;
            total.moved_aside += outcome.moved_aside;
            total.broker_down |= outcome.broker_down;
            if outcome.claimed < self.config.batch_size || outcome.broker_down {
                return Ok(total);
            }
        }
    }

    /// Run until `shutdown`: drain tasks woken by NOTIFY on
    /// [`OUTBOX_CHANNEL`], a jittered poll and the next row's due time.
    /// Returns the final counters. A pass in progress when `shutdown` fires
    /// completes (its publish is already under way).
    pub async fn run(self, shutdown: CancellationToken) -> Result<RelayReport, RelayError> {
        self.config.validate()?;
        let relay = Arc::new(self);
        let wake = Arc::new(tokio::sync::Notify::new());
        let mut tasks = JoinSet::new();
        tasks.spawn(listen(relay.pool.clone(), wake.clone(), shutdown.clone()));
        match relay.config.ordering {
            KeyOrdering::Unordered => {
                for _ in 0..relay.config.concurrency {
                    tasks.spawn(
                        relay
                            .clone()
                            .drain_loop(wake.clone(), shutdown.clone(), None),
                    );
                }
            }
            KeyOrdering::PerKey { shards } => {
                let held = Arc::new(tokio::sync::RwLock::new(Vec::new()));
                tasks.spawn(hold_shards(
                    relay.pool.clone(),
                    shards,
                    held.clone(),
                    shutdown.clone(),
                ));
                tasks.spawn(
                    relay
                        .clone()
                        .drain_loop(wake.clone(), shutdown.clone(), Some(held)),
                );
            }
        }
        tracing::info!(transport = relay.transport.name(), "relay started");
        while tasks.join_next().await.is_some() {}
        let report = relay.stats.report();
        tracing::info!(?report, "relay stopped");
        Ok(report)
    }

    async fn drain_loop(
        self: Arc<Self>,
        wake: Arc<tokio::sync::Notify>,
        shutdown: CancellationToken,
        shards: Option<Arc<tokio::sync::RwLock<Vec<i64>>>>,
    ) {
        let mut backoff = self.config.min_backoff;
        while !shutdown.is_cancelled() {
            let held = match &shards {
                Some(shards) => Some(shards.read().await.clone()),
                None => None,
            };
            if held.as_ref().is_some_and(Vec::is_empty) {
                // Another relay holds every shard: stand by.
                if sleep_or_shutdown(jittered(self.config.poll_interval), &wake, &shutdown).await {
                    return;
                }
                continue;
            }
            match self.pass(held.as_deref()).await {
                Ok(outcome) if outcome.broker_down => {
                    tracing::warn!(transport = self.transport.name(), pause = ?backoff,
                        "broker unavailable; backing off");
                    if sleep_only(jittered(backoff), &shutdown).await {
                        return;
                    }
                    backoff = (backoff * 2).min(self.config.max_backoff);
                }
                Ok(outcome) if outcome.failed > 0 && shards.is_some() => {
                    // Per-key order: failed rows stay due, so pause here
                    // rather than retry them in a tight loop.
                    if sleep_only(jittered(backoff), &shutdown).await {
                        return;
                    }
                    backoff = (backoff * 2).min(self.config.max_backoff);
                }
                Ok(outcome) => {
                    backoff = self.config.min_backoff;
                    if outcome.claimed >= self.config.batch_size {
                        continue; // a full batch: there is probably more
                    }
                    let pause = self.idle_pause().await;
                    if sleep_or_shutdown(pause, &wake, &shutdown).await {
                        return;
                    }
                }
                Err(err) => {
                    self.stats.database_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %err, pause = ?backoff, "relay pass failed; retrying");
                    if sleep_only(jittered(backoff), &shutdown).await {
                        return;
                    }
                    backoff = (backoff * 2).min(self.config.max_backoff);
                }
            }
        }
    }

    /// How long to sleep when nothing is due: until the next row of this
    /// relay's lane becomes due, at most the poll interval. A row already
    /// due that the pass did not get is held by another relay or task,
    /// which will settle it: wait a moment rather than spin on it.
    async fn idle_pause(&self) -> Duration {
        const HELD_ROWS_PAUSE: Duration = Duration::from_millis(5);
        let poll = jittered(self.config.poll_interval);
        let next: Result<Option<DateTime<Utc>>, sqlx::Error> = match &self.config.lane {
            TopicLane::All => {
                sqlx::query_scalar(include_str!("../sql/next_due.sql"))
                    .fetch_one(&self.pool)
                    .await
            }
            TopicLane::Only(topics) => {
                sqlx::query_scalar(include_str!("../sql/next_due_only.sql"))
                    .bind(topics)
                    .fetch_one(&self.pool)
                    .await
            }
            TopicLane::Except(topics) => {
                sqlx::query_scalar(include_str!("../sql/next_due_except.sql"))
                    .bind(topics)
                    .fetch_one(&self.pool)
                    .await
            }
        };
        match next.unwrap_or(None) {
            Some(at) => (at - Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO)
                .max(HELD_ROWS_PAUSE)
                .min(poll),
            None => poll,
        }
    }
}

fn jittered(base: Duration) -> Duration {
    base.mul_f64(rand::rng().random_range(0.8..=1.2))
}

/// Sleep for `pause` or until woken; true when shutting down.
async fn sleep_or_shutdown(
    pause: Duration,
    wake: &tokio::sync::Notify,
    shutdown: &CancellationToken,
) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(pause) => false,
        _ = wake.notified() => false,
        _ = shutdown.cancelled() => true,
    }
}

/// Sleep for `pause` (no early wake-up: used for back-off); true when shutting down.
async fn sleep_only(pause: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(pause) => false,
        _ = shutdown.cancelled() => true,
    }
}

/// Forward NOTIFYs on [`OUTBOX_CHANNEL`] to the drain tasks.
async fn listen(pool: PgPool, wake: Arc<tokio::sync::Notify>, shutdown: CancellationToken) {
    let mut pause = Duration::from_millis(100);
    while !shutdown.is_cancelled() {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(err) => {
                tracing::warn!(error = %err, "cannot LISTEN for outbox rows; polling meanwhile");
                if sleep_only(jittered(pause), &shutdown).await {
                    return;
                }
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if let Err(err) = listener.listen(OUTBOX_CHANNEL).await {
            tracing::warn!(error = %err, "LISTEN failed");
            if sleep_only(jittered(pause), &shutdown).await {
                return;
            }
            continue;
        }
        pause = Duration::from_millis(100);
        wake.notify_waiters();
        loop {
            let next = tokio::select! {
                next = listener.try_recv() => next,
                _ = shutdown.cancelled() => return,
            };
            match next {
                Ok(Some(_)) => wake.notify_waiters(),
                Ok(None) => wake.notify_waiters(),
                Err(err) => {
                    tracing::warn!(error = %err, "outbox listener failed; reconnecting");
                    wake.notify_waiters();
                    break;
                }
            }
        }
    }
}

/// Hold as many key-shard advisory locks as this relay can get, on one
/// session connection, retrying the others every few seconds (a relay that
/// dies releases its shards with its connection).
async fn hold_shards(
    pool: PgPool,
    shards: u32,
    held: Arc<tokio::sync::RwLock<Vec<i64>>>,
    shutdown: CancellationToken,
) {
    while !shutdown.is_cancelled() {
        let mut connection = match pool.acquire().await {
            Ok(connection) => connection.detach(),
            Err(err) => {
                tracing::warn!(error = %err, "cannot get a connection for shard locks");
                if sleep_only(Duration::from_secs(1), &shutdown).await {
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
                        tracing::warn!(error = %err, "shard lock connection lost");
                        lost = true;
                        break;
                    }
                }
            }
            *held.write().await = if lost { Vec::new() } else { mine.clone() };
            if lost {
                break;
            }
            if sleep_only(jittered(Duration::from_secs(2)), &shutdown).await {
                return;
            }
        }
    }
}
