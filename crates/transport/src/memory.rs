//! In-process transport: for unit tests, demos and the embedded default.
//! It is not durable (a process exit loses everything) and not shared
//! between processes; the jobs table and the reconciler make that safe for
//! job wake-ups.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::{
    Capabilities, Delivery, Envelope, Headers, PublishError, Receipt, ReceiptInner,
    SubscribeOptions, Subscriber, Transport, TransportError, check_size, validate_topic,
};

/// What publishing to, and checking, a switched-off in-memory broker says.
const SWITCHED_OFF: &str = "in-memory broker is switched off";

/// Longest destination name accepted (the strictest broker's limit, SQS's).
const MAX_TOPIC_LEN: usize = 80;

#[derive(Debug, Clone)]
struct Stored {
    message_id: u64,
    key: Option<String>,
    payload: Vec<u8>,
    headers: Headers,
    redelivered: bool,
}

#[derive(Default)]
struct TopicState {
    ready: VecDeque<Stored>,
    /// delivery id -> (subscriber id, message)
    in_flight: HashMap<u64, (u64, Stored)>,
}

#[derive(Default)]
struct State {
    topics: HashMap<String, TopicState>,
}

struct Inner {
    state: Mutex<State>,
    /// Woken on every publish and requeue.
    arrived: Notify,
    available: AtomicBool,
    next_id: AtomicU64,
    max_message_bytes: usize,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section is a few queue operations that cannot
        // panic halfway, so a poisoned lock is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn next(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Put a subscriber's deliveries back at the front of their queue.
    fn requeue(&self, topic: &str, delivery_ids: impl IntoIterator<Item = u64>) {
        let mut state = self.lock();
        let Some(queue) = state.topics.get_mut(topic) else {
            return;
        };
        let mut returned: Vec<Stored> = delivery_ids
            .into_iter()
            .filter_map(|id| queue.in_flight.remove(&id).map(|(_, stored)| stored))
            .collect();
        returned.sort_by_key(|stored| std::cmp::Reverse(stored.message_id));
        for mut stored in returned {
            stored.redelivered = true;
            queue.ready.push_front(stored);
        }
        drop(state);
        self.arrived.notify_waiters();
    }
}

/// The in-memory transport. Cheap to clone; clones share the same topics.
#[derive(Clone)]
pub struct MemoryTransport {
    inner: Arc<Inner>,
}

impl Default for MemoryTransport {
    fn default() -> Self {
        Self::new(1024 * 1024)
    }
}

impl MemoryTransport {
    /// A transport accepting messages up to `max_message_bytes`.
    pub fn new(max_message_bytes: usize) -> Self {
        MemoryTransport {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                arrived: Notify::new(),
                available: AtomicBool::new(true),
                next_id: AtomicU64::new(0),
                max_message_bytes,
            }),
        }
    }

    /// Simulate the broker going away (`false`) and coming back (`true`).
    pub fn set_available(&self, available: bool) {
        self.inner.available.store(available, Ordering::SeqCst);
    }

    /// Messages waiting (not in flight) on `topic`.
    pub fn ready_len(&self, topic: &str) -> usize {
        self.inner
            .lock()
            .topics
            .get(topic)
            .map_or(0, |queue| queue.ready.len())
    }
}

#[async_trait]
impl Transport for MemoryTransport {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn address(&self) -> String {
        "in this process".to_owned()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            nack_requeues: true,
            per_key_order: true,
            max_message_bytes: self.inner.max_message_bytes,
        }
    }

    async fn check(&self) -> Result<(), TransportError> {
        if self.inner.available.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(TransportError::Unavailable(SWITCHED_OFF.into()))
        }
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Result<(), PublishError>> {
        if !self.inner.available.load(Ordering::SeqCst) {
            return batch
                .iter()
                .map(|_| Err(PublishError::Unavailable(SWITCHED_OFF.into())))
                .collect();
        }
        let mut results = Vec::with_capacity(batch.len());
        let mut state = self.inner.lock();
        for envelope in batch {
            let checked = validate_topic(&envelope.topic, MAX_TOPIC_LEN)
                .and_then(|()| check_size(envelope, self.inner.max_message_bytes));
            if checked.is_ok() {
                state
                    .topics
                    .entry(envelope.topic.clone())
                    .or_default()
                    .ready
                    .push_back(Stored {
                        message_id: self.inner.next(),
                        key: envelope.key.clone(),
                        payload: envelope.payload.clone(),
                        headers: envelope.headers.clone(),
                        redelivered: false,
                    });
            }
            results.push(checked);
        }
        drop(state);
        self.inner.arrived.notify_waiters();
        results
    }

    async fn subscribe(
        &self,
        topic: &str,
        _options: &SubscribeOptions,
    ) -> Result<Box<dyn Subscriber>, TransportError> {
        validate_topic(topic, MAX_TOPIC_LEN)
            .map_err(|err| TransportError::Refused(err.to_string()))?;
        self.inner
            .lock()
            .topics
            .entry(topic.to_owned())
            .or_default();
        Ok(Box::new(MemorySubscriber {
            inner: self.inner.clone(),
            topic: topic.to_owned(),
            subscriber_id: self.inner.next(),
            closed: false,
        }))
    }

    async fn close(&self) -> Result<(), TransportError> {
        Ok(())
    }

    async fn purge(&self, topic: &str) -> Result<Option<u64>, TransportError> {
        let mut state = self.inner.lock();
        Ok(Some(state.topics.get_mut(topic).map_or(0, |queue| {
            let purged = queue.ready.len();
            queue.ready.clear();
            purged as u64
        })))
    }

    async fn delete_topic(&self, topic: &str) -> Result<(), TransportError> {
        // Ready and in-flight messages go with the topic. A subscriber still
        // open sees only what is published afterwards; its acks and nacks
        // of what it held find nothing to settle.
        self.inner.lock().topics.remove(topic);
        Ok(())
    }
}

struct MemorySubscriber {
    inner: Arc<Inner>,
    topic: String,
    subscriber_id: u64,
    closed: bool,
}

impl MemorySubscriber {
    fn take(&self, max: usize) -> Vec<Delivery> {
        let mut state = self.inner.lock();
        let Some(queue) = state.topics.get_mut(&self.topic) else {
            return Vec::new();
        };
        let mut deliveries = Vec::new();
        while deliveries.len() < max {
            let Some(stored) = queue.ready.pop_front() else {
                break;
            };
            let delivery_id = self.inner.next();
            deliveries.push(Delivery {
                topic: self.topic.clone(),
                key: stored.key.clone(),
                payload: stored.payload.clone(),
                headers: stored.headers.clone(),
                broker_message_id: stored.message_id.to_string(),
                redelivered: stored.redelivered,
                receipt: Receipt(ReceiptInner::Memory { delivery_id }),
            });
            queue
                .in_flight
                .insert(delivery_id, (self.subscriber_id, stored));
        }
        deliveries
    }

    fn delivery_ids(receipts: &[Receipt]) -> Result<Vec<u64>, TransportError> {
        receipts
            .iter()
            .map(|receipt| match receipt.0 {
                ReceiptInner::Memory { delivery_id } => Ok(delivery_id),
                #[allow(unreachable_patterns)]
                _ => Err(TransportError::Refused(
                    "receipt from another transport".into(),
                )),
            })
            .collect()
    }

    fn release_all(&mut self) {
        let mine: Vec<u64> = {
            let state = self.inner.lock();
            state
                .topics
                .get(&self.topic)
                .map(|queue| {
                    queue
                        .in_flight
                        .iter()
                        .filter(|(_, (owner, _))| *owner == self.subscriber_id)
                        .map(|(id, _)| *id)
                        .collect()
                })
                .unwrap_or_default()
        };
        self.inner.requeue(&self.topic, mine);
    }
}

#[async_trait]
impl Subscriber for MemorySubscriber {
    async fn receive(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, TransportError> {
        if self.closed {
            return Err(TransportError::Refused("subscriber is closed".into()));
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Register for the wake-up before looking, so a publish between
            // the look and the wait is not missed.
            let arrived = self.inner.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let deliveries = self.take(max.max(1));
            if !deliveries.is_empty() {
                return Ok(deliveries);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }

    async fn ack(&mut self, receipts: &[Receipt]) -> Result<(), TransportError> {
        let ids = Self::delivery_ids(receipts)?;
        let mut state = self.inner.lock();
        if let Some(queue) = state.topics.get_mut(&self.topic) {
            for id in ids {
                queue.in_flight.remove(&id);
            }
        }
        Ok(())
    }

    async fn nack(&mut self, receipts: &[Receipt], requeue: bool) -> Result<(), TransportError> {
        let ids = Self::delivery_ids(receipts)?;
        if requeue {
            self.inner.requeue(&self.topic, ids);
        } else {
            self.ack(receipts).await?;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        if !self.closed {
            self.release_all();
            self.closed = true;
        }
        Ok(())
    }
}

impl Drop for MemorySubscriber {
    fn drop(&mut self) {
        if !self.closed {
            self.release_all();
        }
    }
}
