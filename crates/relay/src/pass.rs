//! One relay pass: claim due outbox rows, publish them, settle the results
//! (delete, retry later, or move aside to `job_outbox_dead`).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobwire_transport::{Envelope, Headers, PublishError, header};
use sqlx::PgConnection;

use crate::{KeyOrdering, Relay, RelayError, RelayStats, TopicLane};

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// Why, when `broker_down`: the transport's reason for the first row, or
    /// the publish budget that ran out.
    pub unavailable: Option<String>,
    /// The pass claimed as many rows as it asked for: there is probably more.
    pub full: bool,
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

impl Relay {
    /// Rows the next pass claims.
    pub(crate) fn batch_size(&self) -> usize {
        self.batch.load(Ordering::Relaxed)
    }

    /// How long one pass may spend publishing: half the transaction's idle
    /// timeout, so that a pass always settles what it published before the
    /// database ends its session (which would throw away the whole pass and
    /// publish it all again, forever, against a broker that stays slow).
    fn publish_budget(&self) -> Duration {
        self.config.idle_in_transaction_timeout / 2
    }

    /// The pass's `BEGIN`, with the bound on how long its transaction may
    /// sit idle holding its row locks (a relay process that froze or lost
    /// its broker mid-publish): past it the server ends the session and
    /// other relays can take the rows. Sent with the `BEGIN` in one simple
    /// query, one round trip, rather than as a statement of its own. The
    /// value is a number of milliseconds from the config, nothing a caller
    /// writes as text.
    fn begin_pass(&self) -> String {
        format!(
            "BEGIN; SET LOCAL idle_in_transaction_session_timeout = {}",
            self.config.idle_in_transaction_timeout.as_millis()
        )
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
        Envelope {
            outbox_id: row.id,
            topic: self.config.topics.destination(&row.topic),
            key: row.message_key.clone(),
            payload: row.payload.clone().into_bytes(),
            headers,
        }
    }

    /// One pass over the rows due now (in `shards` when ordering by key).
    pub(crate) async fn pass(&self, shards: Option<&[i64]>) -> Result<PassOutcome, RelayError> {
        // Read once: another drain task may resize the batch meanwhile.
        let batch = self.batch_size();
        let mut tx = self
            .pool
            .begin_with(sqlx::AssertSqlSafe(self.begin_pass()))
            .await?;
        let rows: Vec<OutboxRow> = match (shards, self.config.ordering) {
            (Some(held), KeyOrdering::PerKey { shards }) => {
                sqlx::query_as(include_str!("../sql/claim_due_ordered.sql"))
                    // Planned at each call, never with a plan kept from an
                    // empty outbox (jobwire_core's store module explains).
                    .persistent(false)
                    .bind(batch as i64)
                    .bind(i64::from(shards))
                    .bind(held)
                    .fetch_all(&mut *tx)
                    .await?
            }
            _ => {
                let batch = batch as i64;
                match &self.config.lane {
                    TopicLane::All => {
                        sqlx::query_as(include_str!("../sql/claim_due.sql"))
                            .persistent(false)
                            .bind(batch)
                            .fetch_all(&mut *tx)
                            .await?
                    }
                    TopicLane::Only(topics) => {
                        sqlx::query_as(include_str!("../sql/claim_due_only.sql"))
                            .persistent(false)
                            .bind(batch)
                            .bind(topics)
                            .fetch_all(&mut *tx)
                            .await?
                    }
                    TopicLane::Except(topics) => {
                        sqlx::query_as(include_str!("../sql/claim_due_except.sql"))
                            .persistent(false)
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
        let started = Instant::now();
        let budget = self.publish_budget();
        let Ok(results) = tokio::time::timeout(budget, self.transport.publish(&envelopes)).await
        else {
            // Which messages went out is unknown: every row stays due (a
            // wake-up published twice is harmless) and the next passes take
            // half as many, until a batch fits the budget.
            tx.rollback().await?;
            crate::metrics::record_publish_time(self.transport.name(), started.elapsed());
            crate::metrics::record_broker_down(self.transport.name());
            let batch = self.shrink_batch();
            self.stats.slow_publishes.fetch_add(1, Ordering::Relaxed);
            self.stats.broker_down.fetch_add(1, Ordering::Relaxed);
            // A Kafka producer queues against an unreachable broker and
            // answers nothing until its message timeout: this line is then
            // the first word of an outage, so it names both readings.
            tracing::warn!(
                rows = rows.len(),
                budget_ms = budget.as_millis() as u64,
                next_batch = batch,
                address = %self.transport.address(),
                "the broker took longer than the publish budget for a batch (unreachable, or slow \
                 at this size); publishing smaller batches"
            );
            return Ok(PassOutcome {
                claimed: rows.len(),
                failed: rows.len(),
                broker_down: true,
                unavailable: Some(format!(
                    "no answer within the publish budget of {} ms",
                    budget.as_millis()
                )),
                ..PassOutcome::default()
            });
        };
        let publish_time = started.elapsed();
        let full = rows.len() >= batch;
        if full && publish_time < budget / 4 {
            self.grow_batch();
        }
        let mut outcome = self.settle(&mut tx, &rows, results).await?;
        outcome.full = full;
        tx.commit().await?;
        if outcome.broker_down {
            // Not a publish time: a broker that refuses connections answers
            // in a millisecond, which would read as a fast, healthy broker.
            crate::metrics::record_pass(self.transport.name(), outcome.published, 0, 0);
            crate::metrics::record_broker_down(self.transport.name());
        } else {
            crate::metrics::record_publish_time(self.transport.name(), publish_time);
            crate::metrics::record_pass(
                self.transport.name(),
                outcome.published,
                outcome.failed,
                outcome.moved_aside,
            );
        }

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
        let first_unavailable = match results.first() {
            Some(Err(PublishError::Unavailable(reason))) => Some(reason.clone()),
            _ => None,
        };
        let ordered = matches!(self.config.ordering, KeyOrdering::PerKey { .. });
        let mut held_back_keys: HashSet<Option<&str>> = HashSet::new();
        let mut published = Vec::new();
        let (mut failed_ids, mut failed_errors, mut failed_delays) =
            (Vec::new(), Vec::new(), Vec::new());
        let (mut dead_ids, mut dead_errors) = (Vec::new(), Vec::new());
        let mut first_failure: Option<(i64, &str, i32, String)> = None;
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
                    // Kept as the database can keep it: a broker's text
                    // with a NUL would fail the pass, and every later one.
                    let error = jobwire_loop::storable_text(
                        &err.to_string(),
                        jobwire_loop::MAX_ERROR_TEXT_BYTES,
                    )
                    .into_owned();
                    if first_failure.is_none() {
                        first_failure =
                            Some((row.id, row.topic.as_str(), row.attempts + 1, error.clone()));
                    }
                    // A row the broker could not take now (one destination
                    // down while the others publish) waits and counts its
                    // attempts for the back-off, but is not given up on:
                    // like an outage of the whole broker, it is no fault of
                    // the message, and its job still waits for it. Only a
                    // refusal moves a row aside.
                    let unavailable = matches!(err, PublishError::Unavailable(_));
                    if row.attempts + 1 >= self.config.max_attempts && !unavailable {
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
        // One line per pass, not per row: a broker refusing a whole batch
        // would otherwise write hundreds of lines a second.
        if let Some((outbox_id, topic, attempt, error)) = first_failure {
            tracing::warn!(
                rows = failed_ids.len() + dead_ids.len(),
                outbox_id,
                topic,
                attempt,
                %error,
                "publish failed (the first failed row shown)"
            );
        }
        outcome.broker_down = broker_down;
        if broker_down {
            outcome.unavailable = first_unavailable;
        }
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

    /// Halve the batch (not below one row); returns the new size.
    fn shrink_batch(&self) -> usize {
        let smaller = (self.batch_size() / 2).max(1);
        self.batch.store(smaller, Ordering::Relaxed);
        smaller
    }

    /// Double the batch back towards `config.batch_size` after a full pass
    /// that published well within its budget.
    fn grow_batch(&self) {
        let current = self.batch_size();
        if current < self.config.batch_size {
            self.batch
                .store((current * 2).min(self.config.batch_size), Ordering::Relaxed);
        }
    }

    /// How long a row waits after its `attempt`-th failure.
    fn retry_delay(&self, attempt: i32) -> Duration {
        jobwire_loop::Backoff {
            base: self.config.min_backoff,
            max: self.config.max_backoff,
            jitter_ratio: 0.0,
        }
        .capped_delay(attempt.max(1) as u32)
    }
}
