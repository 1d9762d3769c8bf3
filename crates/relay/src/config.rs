//! Relay settings: topic mapping, key ordering, topic lanes, and their validation.

use std::collections::HashMap;
use std::time::Duration;

#[cfg(doc)]
use crate::Relay;
use jobwire_loop::InvalidSetting;

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
    /// The pass's `idle_in_transaction_session_timeout`: longest its
    /// transaction may sit idle (waiting on the broker) while it holds its
    /// rows; past it the database ends the session and the rows go to
    /// another relay. A pass gives up publishing after half of it (the
    /// publish budget), leaves its rows due and halves its batch, so a slow
    /// broker gets smaller batches instead of the same one again and again.
    /// From 100 ms to PostgreSQL's bound for the setting, 2,147,483,647 ms.
    pub idle_in_transaction_timeout: Duration,
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
            idle_in_transaction_timeout: Duration::from_secs(30),
        }
    }
}

impl RelayConfig {
    /// Most outbox rows one pass takes (one transaction, one publish call).
    pub const MAX_BATCH_SIZE: usize = 100_000;
    /// Most drain tasks (each holds a connection while it passes).
    pub const MAX_CONCURRENCY: usize = 1_000;

    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        InvalidSetting::require_positive("relay.batch_size", self.batch_size)?;
        InvalidSetting::require_positive("relay.concurrency", self.concurrency)?;
        if self.batch_size > Self::MAX_BATCH_SIZE {
            return Err(InvalidSetting::new(
                "relay.batch_size",
                format!("must be at most {}", Self::MAX_BATCH_SIZE),
            ));
        }
        if self.concurrency > Self::MAX_CONCURRENCY {
            return Err(InvalidSetting::new(
                "relay.concurrency",
                format!("must be at most {}", Self::MAX_CONCURRENCY),
            ));
        }
        if self.max_attempts < 1 {
            return Err(InvalidSetting::new(
                "relay.max_attempts",
                "must be at least 1",
            ));
        }
        InvalidSetting::require_nonzero("relay.poll_interval", self.poll_interval)?;
        InvalidSetting::require_nonzero("relay.min_backoff", self.min_backoff)?;
        if self.max_backoff < self.min_backoff {
            return Err(InvalidSetting::new(
                "relay.max_backoff",
                "must be at least min_backoff",
            ));
        }
        if self.idle_in_transaction_timeout < Duration::from_millis(100) {
            return Err(InvalidSetting::new(
                "relay.idle_in_transaction_timeout",
                "must be at least 100 ms",
            ));
        }
        // PostgreSQL's own bound for the setting. Past it, the pass's
        // `BEGIN; SET LOCAL …` would begin a transaction and then fail in
        // it, leaving its pooled connection in an aborted transaction.
        if self.idle_in_transaction_timeout.as_millis() > i32::MAX as u128 {
            return Err(InvalidSetting::new(
                "relay.idle_in_transaction_timeout",
                format!("must be at most {} ms (about 24 days)", i32::MAX),
            ));
        }
        if let KeyOrdering::PerKey { shards } = self.ordering
            && shards == 0
        {
            return Err(InvalidSetting::new(
                "relay.ordering",
                "per-key ordering needs at least one shard",
            ));
        }
        match (&self.lane, self.ordering) {
            (TopicLane::Only(topics), _) if topics.is_empty() => {
                return Err(InvalidSetting::new(
                    "relay.lane",
                    "a lane of only no topics would drain nothing",
                ));
            }
            (TopicLane::Only(_) | TopicLane::Except(_), KeyOrdering::PerKey { .. }) => {
                return Err(InvalidSetting::new(
                    "relay.lane",
                    "topic lanes work in unordered mode only",
                ));
            }
            _ => {}
        }
        Ok(())
    }
}
