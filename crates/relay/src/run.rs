//! The `Relay` type and its loop: drain tasks, waiting and back-off.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use jobwire_loop::{IdlePoll, Outage, POLL_SPREAD, Pause, Wake, jittered, sleep};
use jobwire_transport::Transport;
use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use crate::OUTBOX_CHANNEL;
use crate::listen::listen;
use crate::shards::hold_shards;
use crate::{
    KeyOrdering, PassOutcome, RelayConfig, RelayError, RelayReport, RelayStats, TopicLane,
};

/// Drains `job_outbox` into a [`Transport`].
pub struct Relay {
    pub(crate) pool: PgPool,
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) config: RelayConfig,
    pub(crate) stats: Arc<RelayStats>,
    /// Rows per pass now: `config.batch_size`, halved while the broker is
    /// too slow to take a whole batch within the pass's publish budget.
    pub(crate) batch: AtomicUsize,
}

impl Relay {
    /// A relay; nothing runs until [`Relay::run`] or [`Relay::drain_once`].
    pub fn new(pool: PgPool, transport: Arc<dyn Transport>, config: RelayConfig) -> Self {
        Relay {
            pool,
            transport,
            batch: AtomicUsize::new(config.batch_size),
            config,
            stats: Arc::new(RelayStats::default()),
        }
    }

    /// Live counters.
    pub fn stats(&self) -> Arc<RelayStats> {
        self.stats.clone()
    }

    /// Publish everything due now, pass after pass, until a pass comes back
    /// short or the broker is down. (Unordered mode; for tests and tools.)
    pub async fn drain_once(&self) -> Result<PassOutcome, RelayError> {
        self.config.validate()?;
        let mut total = PassOutcome::default();
        loop {
            let outcome = self.pass(None).await?;
            total.claimed += outcome.claimed;
            total.published += outcome.published;
            total.failed += outcome.failed;
            total.moved_aside += outcome.moved_aside;
            total.broker_down |= outcome.broker_down;
            if outcome.broker_down {
                total.unavailable = outcome.unavailable.clone();
            }
            if !outcome.full || outcome.broker_down {
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
        let wake = Arc::new(Wake::new());
        // The loops stop on a child of `shutdown`, which also stops them
        // all when one ends early.
        let stop = shutdown.child_token();
        let mut tasks = JoinSet::new();
        tasks.spawn(listen(relay.pool.clone(), wake.clone(), stop.clone()));
        match relay.config.ordering {
            KeyOrdering::Unordered => {
                for _ in 0..relay.config.concurrency {
                    tasks.spawn(relay.clone().drain_loop(wake.clone(), stop.clone(), None));
                }
            }
            KeyOrdering::PerKey { shards } => {
                let held = Arc::new(tokio::sync::RwLock::new(Vec::new()));
                tasks.spawn(hold_shards(
                    relay.pool.clone(),
                    shards,
                    held.clone(),
                    stop.clone(),
                ));
                tasks.spawn(
                    relay
                        .clone()
                        .drain_loop(wake.clone(), stop.clone(), Some(held)),
                );
            }
        }
        // The settings in effect, for an operator tuning them.
        tracing::info!(
            transport = relay.transport.name(),
            address = %relay.transport.address(),
            batch_size = relay.config.batch_size,
            concurrency = relay.config.concurrency,
            "relay started"
        );
        // Beside the drain, not before it: a broker that is down must not
        // hold up the start, and the drain retries on its own. But an idle
        // relay publishes nothing, so without this a wrong address or
        // password would go unreported until the first row.
        tokio::spawn(report_broker_reachability(
            relay.transport.clone(),
            stop.clone(),
        ));
        let early = jobwire_loop::join_loops(&mut tasks, "relay", &stop).await;
        let report = relay.stats.report();
        tracing::info!("relay stopped: {}", jobwire_loop::nonzero_counts(&report));
        match early {
            None => Ok(report),
            Some(why) => Err(RelayError::LoopEnded(why)),
        }
    }

    async fn drain_loop(
        self: Arc<Self>,
        wake: Arc<Wake>,
        shutdown: CancellationToken,
        shards: Option<Arc<tokio::sync::RwLock<Vec<i64>>>>,
    ) {
        let mut backoff = Pause::new(self.config.min_backoff, self.config.max_backoff);
        let mut idle = IdlePoll::new(self.config.poll_interval);
        // Since when this task has found the broker unavailable, so that the
        // pass that publishes again says so.
        let mut down_since: Option<Instant> = None;
        // Passes that failed in a row (the database, not the broker).
        let mut database_outage = Outage::new();
        while !shutdown.is_cancelled() {
            // Taken before the pass looks at the table: a row announced
            // while the pass runs (its NOTIFY finds this task busy) is
            // looked for again at once, not at the end of the idle pause.
            let mark = wake.mark();
            let held = match &shards {
                Some(shards) => Some(shards.read().await.clone()),
                None => None,
            };
            if held.as_ref().is_some_and(Vec::is_empty) {
                // Another relay holds every shard: stand by.
                let poll = jittered(self.config.poll_interval, POLL_SPREAD);
                if wake.sleep_since(mark, poll, &shutdown).await.is_cancelled() {
                    return;
                }
                continue;
            }
            let passed = self.pass(held.as_deref()).await;
            if passed.is_ok()
                && let Some(ended) = database_outage.succeeded()
            {
                tracing::info!("relay passes work again {ended}");
            }
            if let Ok(outcome) = &passed {
                if outcome.broker_down {
                    down_since.get_or_insert_with(Instant::now);
                } else if outcome.published > 0
                    && let Some(since) = down_since.take()
                {
                    // Only a publish says the broker is back: a pass with
                    // nothing published (no row due, or only rows the
                    // broker rejected) says nothing either way.
                    tracing::info!(
                        transport = self.transport.name(),
                        unavailable_for = ?since.elapsed(),
                        "broker reachable again; publishing"
                    );
                }
            }
            match passed {
                Ok(outcome) if outcome.broker_down => {
                    let pause = backoff.next_after_failure();
                    tracing::warn!(
                        transport = self.transport.name(),
                        reason = outcome.unavailable.as_deref().unwrap_or("unknown"),
                        ?pause,
                        "broker unavailable; backing off"
                    );
                    if sleep(pause, &shutdown).await.is_cancelled() {
                        return;
                    }
                }
                Ok(outcome) if outcome.failed > 0 && shards.is_some() => {
                    // Per-key order: failed rows stay due, so pause here
                    // rather than retry them in a tight loop.
                    if sleep(backoff.next_after_failure(), &shutdown)
                        .await
                        .is_cancelled()
                    {
                        return;
                    }
                }
                Ok(outcome) => {
                    backoff.reset();
                    if outcome.full {
                        continue; // a full batch: there is probably more
                    }
                    if outcome.claimed > 0 {
                        idle.found_work();
                    }
                    let pause = self.idle_pause(&mut idle).await;
                    if wake
                        .sleep_since(mark, pause, &shutdown)
                        .await
                        .is_cancelled()
                    {
                        return;
                    }
                }
                Err(err) => {
                    self.stats.database_errors.fetch_add(1, Ordering::Relaxed);
                    database_outage.failed();
                    let pause = backoff.next_after_failure();
                    tracing::warn!(error = %err, ?pause, "relay pass failed; retrying");
                    if sleep(pause, &shutdown).await.is_cancelled() {
                        return;
                    }
                }
            }
        }
    }

    /// How long to sleep when nothing is due: shortly after a pass that
    /// found rows (a commit may have skipped its NOTIFY, see [`IdlePoll`]);
    /// otherwise until the next row of this relay's lane becomes due, at
    /// most the poll interval. A row already due that the pass did not get
    /// is held by another relay or task, which will settle it: wait a
    /// moment rather than spin on it.
    async fn idle_pause(&self, idle: &mut IdlePoll) -> Duration {
        const HELD_ROWS_PAUSE: Duration = Duration::from_millis(5);
        if let Some(short) = idle.next_short_pause() {
            return short; // soon after work: no need to ask for the next due row
        }
        let poll = jittered(self.config.poll_interval, POLL_SPREAD);
        let next: Result<Option<DateTime<Utc>>, sqlx::Error> = match &self.config.lane {
            TopicLane::All => {
                sqlx::query_scalar(include_str!("../sql/next_due.sql"))
                    .persistent(false)
                    .fetch_one(&self.pool)
                    .await
            }
            TopicLane::Only(topics) => {
                sqlx::query_scalar(include_str!("../sql/next_due_only.sql"))
                    .persistent(false)
                    .bind(topics)
                    .fetch_one(&self.pool)
                    .await
            }
            TopicLane::Except(topics) => {
                sqlx::query_scalar(include_str!("../sql/next_due_except.sql"))
                    .persistent(false)
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

/// Log once whether the broker answers and takes the credentials.
async fn report_broker_reachability(transport: Arc<dyn Transport>, shutdown: CancellationToken) {
    tokio::select! {
        () = shutdown.cancelled() => {}
        checked = transport.check() => match checked {
            Ok(()) => tracing::info!(
                transport = transport.name(),
                address = %transport.address(),
                "broker reachable"
            ),
            Err(err) => tracing::error!(
                transport = transport.name(),
                address = %transport.address(),
                error = %err,
                "cannot reach the broker; outbox rows wait in the outbox until it answers"
            ),
        },
    }
}
