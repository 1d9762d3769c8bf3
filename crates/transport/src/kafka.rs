//! Apache Kafka (or any Kafka-protocol broker) through rdkafka: an idempotent
//! producer with `acks=all` keyed by the message key (per-key order through
//! the partition), an explicit ensure-topic step, and a consumer group per
//! topic whose offsets are committed only up to the lowest unacknowledged
//! delivery.
//!
//! A group rebalances as a whole: when a member joins or leaves, every
//! member stops receiving until all of them have joined again, and a member
//! takes its part in a rebalance only while its consumer is polled. A
//! worker receives only while the queue has a free slot; while every slot
//! is busy it calls [`Subscriber::hold`], which keeps polling (keeping
//! what arrives meanwhile), so a queue busy with long jobs no longer
//! holds up its group's rebalances until one finishes (up to librdkafka's
//! `max.poll.interval.ms`, five minutes). And each topic gets a group of
//! its own, named [`group_for_topic`]: a worker that starts or stops
//! serving one topic pauses no other topic's wake-ups, in its own process
//! or any other (queues that share a topic share its group). This is
//! librdkafka's default, eager rebalancing; the cooperative kind
//! (`cooperative-sticky`) would let members keep their partitions through
//! a rebalance.
//!
//! Offsets are committed only from what this member received in the
//! partition's current log: the progress of a partition is forgotten when
//! the partition is revoked, and started over when its offsets go backwards
//! below what was acknowledged (the broker lost its log, or the topic was
//! deleted and re-created). Otherwise a stale, far-too-high offset would be
//! committed and the next member would start past the end of the new log,
//! skipping every wake-up below it — the reconciler's re-wakes included.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers as _, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::Mutex;

use crate::{
    Capabilities, Delivery, Envelope, Headers, PublishError, Receipt, ReceiptInner,
    SubscribeOptions, Subscriber, Transport, TransportError, check_size, validate_topic,
};

/// Kafka's limit on topic name length.
const MAX_TOPIC_LEN: usize = 249;

/// Settings for [`KafkaTransport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// `bootstrap.servers`, e.g. `127.0.0.1:9092`.
    pub bootstrap: String,
    /// How long a send may wait for `acks=all` before it fails (also bounds
    /// admin requests).
    pub timeout: Duration,
    /// Largest message accepted (the broker's default `message.max.bytes`
    /// is about 1 MB).
    pub max_message_bytes: usize,
    /// Partitions of topics this transport creates.
    pub partitions: i32,
    /// Replication factor of topics this transport creates.
    pub replication: i32,
    /// Longest a consumer's fetch waits at the broker for new messages
    /// (`fetch.wait.max.ms`). librdkafka's 500 ms default showed as
    /// hundreds of milliseconds between publish and delivery on a quiet
    /// topic here; a wake-up is worth a few more idle fetches.
    pub fetch_wait: Duration,
}

impl KafkaConfig {
    /// Defaults for `bootstrap`: 30 s timeout, 1,000,000-byte messages,
    /// 4 partitions, replication 1, 10 ms fetch wait.
    pub fn new(bootstrap: impl Into<String>) -> Self {
        KafkaConfig {
            bootstrap: bootstrap.into(),
            timeout: Duration::from_secs(30),
            max_message_bytes: 1_000_000,
            partitions: 4,
            replication: 1,
            fetch_wait: Duration::from_millis(10),
        }
    }
}

struct Shared {
    config: KafkaConfig,
    admin: AdminClient<DefaultClientContext>,
    /// Topics known to exist.
    known_topics: Mutex<HashSet<String>>,
}

impl Shared {
    async fn ensure_topic(&self, topic: &str) -> Result<(), PublishError> {
        validate_topic(topic, MAX_TOPIC_LEN)?;
        if self.known_topics.lock().await.contains(topic) {
            return Ok(());
        }
        let new_topic = NewTopic::new(
            topic,
            self.config.partitions,
            TopicReplication::Fixed(self.config.replication),
        );
        let options = AdminOptions::new()
            .operation_timeout(Some(self.config.timeout))
            .request_timeout(Some(self.config.timeout));
        let results = self
            .admin
            .create_topics(&[new_topic], &options)
            .await
            .map_err(|err| {
                PublishError::Unavailable(format!("cannot create topic {topic}: {err}"))
            })?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code @ RDKafkaErrorCode::InvalidTopic)) => {
                    return Err(PublishError::Rejected(format!("topic {name}: {code}")));
                }
                Err((name, code)) => {
                    return Err(PublishError::Unavailable(format!("topic {name}: {code}")));
                }
            }
        }
        self.known_topics.lock().await.insert(topic.to_owned());
        Ok(())
    }

    async fn delete_topic(&self, topic: &str) -> Result<(), TransportError> {
        // Forgotten before (a failed delete may still have deleted it) and
        // after (a publish racing the delete may have found it still there):
        // an extra ensure costs a round trip, a stale entry sends to a topic
        // that is gone.
        self.known_topics.lock().await.remove(topic);
        // The operation timeout makes the broker answer once the controller
        // has deleted the topic, so creating it again right after works.
        let options = AdminOptions::new()
            .operation_timeout(Some(self.config.timeout))
            .request_timeout(Some(self.config.timeout));
        let results = self
            .admin
            .delete_topics(&[topic], &options)
            .await
            .map_err(|err| {
                TransportError::Unavailable(format!("cannot delete topic {topic}: {err}"))
            })?;
        for result in results {
            match result {
                Ok(_)
                | Err((
                    _,
                    RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic,
                )) => {}
                Err((name, code @ RDKafkaErrorCode::InvalidTopic)) => {
                    return Err(TransportError::Refused(format!("topic {name}: {code}")));
                }
                Err((name, code)) => {
                    return Err(TransportError::Unavailable(format!("topic {name}: {code}")));
                }
            }
        }
        self.known_topics.lock().await.remove(topic);
        Ok(())
    }
}

/// Publishes to Kafka.
pub struct KafkaTransport {
    shared: Arc<Shared>,
    /// Replaced by a new one once librdkafka reports a fatal error: an
    /// idempotent producer that hit one fails every send from then on. A
    /// broker that comes back without its producer ids (one that keeps
    /// them in memory) causes one ("unknown producer id").
    producer: std::sync::Mutex<FutureProducer>,
}

/// The idempotent producer, `acks=all`.
fn create_producer(config: &KafkaConfig) -> Result<FutureProducer, TransportError> {
    ClientConfig::new()
        .set("bootstrap.servers", &config.bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", config.timeout.as_millis().to_string())
        .set("linger.ms", "2")
        .set(
            "message.max.bytes",
            (config.max_message_bytes + 64 * 1024).to_string(),
        )
        .create()
        .map_err(|err| TransportError::Refused(format!("producer config: {err}")))
}

impl KafkaTransport {
    /// Create the producer and admin client (connections open lazily).
    pub fn new(config: KafkaConfig) -> Result<Self, TransportError> {
        let producer = create_producer(&config)?;
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &config.bootstrap)
            .create()
            .map_err(|err| TransportError::Refused(format!("admin config: {err}")))?;
        Ok(KafkaTransport {
            shared: Arc::new(Shared {
                config,
                admin,
                known_topics: Mutex::new(HashSet::new()),
            }),
            producer: std::sync::Mutex::new(producer),
        })
    }

    /// The producer to send with: the current one, or a new one in its
    /// place if it has hit a fatal error. The sends that failed with it
    /// failed as unavailable, so their rows stay in the outbox and the
    /// relay sends them again through the new one.
    fn live_producer(&self) -> Result<FutureProducer, PublishError> {
        let mut producer = self.producer_slot();
        if let Some((code, reason)) = producer.client().fatal_error() {
            tracing::warn!(%code, %reason, "the Kafka producer hit a fatal error; starting a new one");
            let fresh = create_producer(&self.shared.config)
                .map_err(|err| PublishError::Unavailable(err.to_string()))?;
            let failed = std::mem::replace(&mut *producer, fresh);
            // Dropping a producer purges and flushes it (up to 500 ms):
            // not on the runtime's threads.
            tokio::task::spawn_blocking(move || drop(failed));
        }
        Ok(producer.clone())
    }

    /// The current producer, locked (a panic while it was held left it
    /// usable: nothing is written under the lock but a whole replacement).
    fn producer_slot(&self) -> std::sync::MutexGuard<'_, FutureProducer> {
        self.producer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether the broker says the topic does not exist (any more).
fn topic_vanished(err: &KafkaError) -> bool {
    matches!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)
    )
}

fn classify(err: &KafkaError) -> PublishError {
    match err.rdkafka_error_code() {
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidTopic
            | RDKafkaErrorCode::InvalidMessage
            | RDKafkaErrorCode::InvalidMessageSize,
        ) => PublishError::Rejected(err.to_string()),
        _ => PublishError::Unavailable(err.to_string()),
    }
}

#[async_trait]
impl Transport for KafkaTransport {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn address(&self) -> String {
        self.shared.config.bootstrap.clone()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // Redelivered from this member's memory (the committed offset
            // stays below it meanwhile, so a restart reads it again too).
            nack_requeues: true,
            per_key_order: true,
            max_message_bytes: self.shared.config.max_message_bytes,
        }
    }

    async fn check(&self) -> Result<(), TransportError> {
        // The cluster's metadata answers only once a bootstrap server does.
        // The call blocks for up to the timeout, on a thread of its own
        // rather than the runtime's blocking pool: a runtime shutting down
        // waits for its blocking tasks, and a relay stopped while the broker
        // is down would wait out the whole timeout.
        let producer = self.producer_slot().clone();
        let timeout = self.shared.config.timeout;
        let (answer, answered) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = answer.send(producer.client().fetch_metadata(None, timeout));
        });
        answered
            .await
            .map_err(|_| TransportError::Unavailable("the metadata request was lost".into()))?
            .map(|_| ())
            .map_err(|err| TransportError::Unavailable(format!("cluster metadata: {err}")))
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Result<(), PublishError>> {
        let producer = match self.live_producer() {
            Ok(producer) => producer,
            Err(err) => return vec![Err(err); batch.len()],
        };
        let mut results: Vec<Option<Result<(), PublishError>>> = vec![None; batch.len()];
        let mut topic_state: HashMap<&str, Result<(), PublishError>> = HashMap::new();
        let mut pending = Vec::new();
        for (index, envelope) in batch.iter().enumerate() {
            if let Err(err) = check_size(envelope, self.shared.config.max_message_bytes) {
                results[index] = Some(Err(err));
                continue;
            }
            let ready = match topic_state.get(envelope.topic.as_str()) {
                Some(state) => state.clone(),
                None => {
                    let state = self.shared.ensure_topic(&envelope.topic).await;
                    topic_state.insert(&envelope.topic, state.clone());
                    state
                }
            };
            if let Err(err) = ready {
                results[index] = Some(Err(err));
                continue;
            }
            let mut headers = OwnedHeaders::new_with_capacity(envelope.headers.len());
            for (name, value) in &envelope.headers {
                headers = headers.insert(Header {
                    key: name,
                    value: Some(value.as_bytes()),
                });
            }
            let mut record = FutureRecord::to(&envelope.topic)
                .payload(&envelope.payload)
                .headers(headers);
            if let Some(key) = &envelope.key {
                record = record.key(key);
            }
            match producer.send_result(record) {
                Ok(delivery) => pending.push((index, delivery)),
                Err((err, _)) => results[index] = Some(Err(classify(&err))),
            }
        }
        let mut vanished: HashSet<&str> = HashSet::new();
        for (index, delivery) in pending {
            results[index] = Some(match delivery.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err((err, _))) => {
                    if topic_vanished(&err) {
                        vanished.insert(batch[index].topic.as_str());
                    }
                    Err(classify(&err))
                }
                Err(_) => Err(PublishError::Unavailable(
                    "producer dropped the message".into(),
                )),
            });
        }
        if !vanished.is_empty() {
            // The topic was deleted, or the broker came back without it (a
            // broker that keeps its log in memory): create it again on the
            // next attempt instead of failing every row until it is dead.
            let mut known = self.shared.known_topics.lock().await;
            for topic in vanished {
                known.remove(topic);
            }
        }
        results
            .into_iter()
            .map(|result| result.expect("every message has a result"))
            .collect()
    }

    async fn subscribe(
        &self,
        topic: &str,
        options: &SubscribeOptions,
    ) -> Result<Box<dyn Subscriber>, TransportError> {
        self.shared.ensure_topic(topic).await?;
        let revoked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let paused = Arc::new(AtomicBool::new(false));
        let consumer: StreamConsumer<RebalanceContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.shared.config.bootstrap)
            .set("group.id", group_for_topic(&options.group, topic))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("session.timeout.ms", "10000")
            .set(
                "fetch.wait.max.ms",
                self.shared.config.fetch_wait.as_millis().to_string(),
            )
            .create_with_context(RebalanceContext {
                revoked: revoked.clone(),
                paused: paused.clone(),
            })
            .map_err(|err| TransportError::Refused(format!("consumer config: {err}")))?;
        consumer
            .subscribe(&[topic])
            .map_err(|err| TransportError::Unavailable(format!("subscribe {topic}: {err}")))?;
        Ok(Box::new(KafkaSubscriber {
            consumer: Some(Arc::new(consumer)),
            topic: topic.to_owned(),
            progress: HashMap::new(),
            epochs: 0,
            revoked,
            paused,
            held: VecDeque::new(),
            last_position_check: tokio::time::Instant::now(),
            position_check_running: Arc::new(AtomicBool::new(false)),
            timeout: self.shared.config.timeout,
        }))
    }

    async fn close(&self) -> Result<(), TransportError> {
        let producer = self.producer_slot().clone();
        let timeout = self.shared.config.timeout;
        tokio::task::spawn_blocking(move || producer.flush(timeout))
            .await
            .map_err(|err| TransportError::Unavailable(err.to_string()))?
            .map_err(|err| TransportError::Unavailable(format!("flush: {err}")))
    }

    async fn delete_topic(&self, topic: &str) -> Result<(), TransportError> {
        self.shared.delete_topic(topic).await
    }
}

/// The consumer group that subscribes to `topic`: `<group>.<topic>`, where
/// `group` is [`SubscribeOptions::group`] (see the module's head for why a
/// group per topic).
pub fn group_for_topic(group: &str, topic: &str) -> String {
    format!("{group}.{topic}")
}

/// Which offsets of a partition are received but not yet acknowledged.
struct PartitionProgress {
    /// Each delivery not yet acknowledged, by offset, kept as a redelivery
    /// for [`Subscriber::nack`] with requeue to hand out again.
    unacked: BTreeMap<i64, Delivery>,
    /// One past the highest offset received.
    next: i64,
    /// Which tracking of this partition the receipts belong to: a receipt
    /// from before a revocation or a log restart acknowledges nothing now
    /// (its offset may name another message of the new log).
    epoch: u64,
}

impl PartitionProgress {
    fn new(epoch: u64) -> Self {
        PartitionProgress {
            unacked: BTreeMap::new(),
            next: 0,
            epoch,
        }
    }
}

impl PartitionProgress {
    /// The offset to commit: everything below it is acknowledged.
    fn committable(&self) -> i64 {
        self.unacked
            .first_key_value()
            .map_or(self.next, |(offset, _)| *offset)
    }
}

/// [`KafkaSubscriber::rewind_positions_past_the_end`]'s look, blocking:
/// each fetch position past the end of its partition's log moves back to
/// the log's start.
fn rewind_each_position_past_the_end(
    consumer: &StreamConsumer<RebalanceContext>,
    timeout: Duration,
) {
    let Ok(positions) = consumer.position() else {
        return;
    };
    for element in positions.elements() {
        let Offset::Offset(position) = element.offset() else {
            continue;
        };
        let (topic, partition) = (element.topic(), element.partition());
        let Ok((low, high)) = consumer.fetch_watermarks(topic, partition, timeout) else {
            continue;
        };
        if position > high
            && consumer
                .seek(topic, partition, Offset::Offset(low), timeout)
                .is_ok()
        {
            tracing::warn!(%topic, partition, position, rewound_to = low,
                "kafka fetch position was past the end of the partition's log (the log started over); reading it from its start");
        }
    }
}

/// Runs inside the consumer's rebalances. Tells the subscriber which
/// partitions the group took away, so it stops tracking (and committing)
/// them: the member that gets a partition next starts from the offset
/// committed while this one still held it. And sets what the group hands
/// over paused while the subscriber has its partitions paused (a hold that
/// kept [`HELD_MAX`] deliveries), resumed otherwise: librdkafka may keep a
/// partition's pause through a revocation, and a partition paused for ever
/// is never read.
struct RebalanceContext {
    revoked: Arc<std::sync::Mutex<Vec<(String, i32)>>>,
    paused: Arc<AtomicBool>,
}

impl ClientContext for RebalanceContext {}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(partitions) = rebalance {
            let mut revoked = self.revoked.lock().expect("revocation list poisoned");
            for partition in partitions.elements() {
                revoked.push((partition.topic().to_owned(), partition.partition()));
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(partitions) = rebalance {
            let set = if self.paused.load(Ordering::Relaxed) {
                consumer.pause(partitions)
            } else {
                consumer.resume(partitions)
            };
            if let Err(err) = set {
                tracing::warn!(error = %err, "cannot pause or resume assigned kafka partitions");
            }
        }
    }
}

struct KafkaSubscriber {
    consumer: Option<Arc<StreamConsumer<RebalanceContext>>>,
    topic: String,
    progress: HashMap<(String, i32), PartitionProgress>,
    /// The last tracking epoch handed out (see [`PartitionProgress::epoch`]).
    epochs: u64,
    /// Partitions revoked since the last look (filled by the consumer's
    /// rebalance callback).
    revoked: Arc<std::sync::Mutex<Vec<(String, i32)>>>,
    /// Set while [`Subscriber::hold`] has this member's partitions paused
    /// (read by the rebalance callback).
    paused: Arc<AtomicBool>,
    /// Deliveries received during holds, returned first by the next
    /// receive; at most [`HELD_MAX`] (then the partitions are paused).
    held: VecDeque<Delivery>,
    /// When fetch positions were last compared with the logs' ends.
    last_position_check: tokio::time::Instant,
    /// Set while a comparison runs (on a thread of its own).
    position_check_running: Arc<AtomicBool>,
    /// Broker call timeout.
    timeout: Duration,
}

/// How many deliveries a hold keeps before it pauses the partitions. Below
/// this it takes what arrives and keeps it, as librdkafka itself would
/// have queued it: a resumed partition is fetched again only after about a
/// second (librdkafka's fetcher looks at it on its own schedule; measured
/// 0.97-0.98 s against a local broker), so pausing at every busy moment
/// would make every freed slot wait that long for its next wake-up. At
/// this many a backlog drains well past that second first.
const HELD_MAX: usize = 1_000;

/// How often an idle subscriber checks that no fetch position is past the
/// end of its partition's log.
const POSITION_CHECK_INTERVAL: Duration = Duration::from_secs(5);

impl KafkaSubscriber {
    /// Forget the progress of partitions the group took away: acknowledging
    /// their deliveries later commits nothing (the wake-ups may come again
    /// to the new holder; duplicates are harmless, skipped ones are not).
    /// Deliveries kept by a hold from a revoked partition are dropped too:
    /// never acknowledged, they are below the offset committed for it, so
    /// the partition's next holder reads them again. Called as each message
    /// is converted (a rebalance runs inside the poll that returned it),
    /// before it is tracked against its partition, and before a receive
    /// hands out what was kept.
    fn forget_revoked(&mut self) {
        let revoked: HashSet<(String, i32)> =
            std::mem::take(&mut *self.revoked.lock().expect("revocation list poisoned"))
                .into_iter()
                .collect();
        if revoked.is_empty() {
            return;
        }
        for key in &revoked {
            self.progress.remove(key);
        }
        self.held.retain(|delivery| match &delivery.receipt.0 {
            ReceiptInner::Kafka {
                topic, partition, ..
            } => !revoked.contains(&(topic.clone(), *partition)),
            #[allow(unreachable_patterns)]
            _ => true,
        });
    }

    /// Never skip forward silently: a fetch position past the end of its
    /// partition's log means the log started over (a broker that lost it, a
    /// topic deleted and re-created). Apache Kafka answers such a fetch with
    /// OFFSET_OUT_OF_RANGE and librdkafka resets it (`auto.offset.reset =
    /// earliest`); a broker that just returns nothing would leave this
    /// member waiting past the end for ever, and every wake-up below it
    /// unread. So an idle subscriber looks every few seconds and moves such
    /// a position back to the start of the log.
    ///
    /// The look asks the broker once per partition and blocks while it
    /// does: up to the broker call timeout each, with the broker down. It
    /// runs on a thread of its own, one at a time, and the receive does not
    /// wait for it: a receive that waited made the worker's loop (and its
    /// safety net, which claims from the table while the broker is away)
    /// take minutes a turn. (Not the runtime's blocking pool: a runtime
    /// shutting down waits for its blocking tasks.)
    fn rewind_positions_past_the_end(&mut self, consumer: &Arc<StreamConsumer<RebalanceContext>>) {
        if self.last_position_check.elapsed() < POSITION_CHECK_INTERVAL
            || self.position_check_running.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.last_position_check = tokio::time::Instant::now();
        let consumer = consumer.clone();
        let timeout = self.timeout;
        // Cleared however the thread ends (a panic in the client too), so
        // the check is never left off for good.
        struct Running(Arc<AtomicBool>);
        impl Drop for Running {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let running = Running(self.position_check_running.clone());
        std::thread::spawn(move || {
            let _running = running;
            rewind_each_position_past_the_end(&consumer, timeout);
        });
    }

    /// Pause or resume every partition this member has now, and tell the
    /// rebalance callback which to do with those it gets next.
    fn set_paused(
        &self,
        consumer: &StreamConsumer<RebalanceContext>,
        paused: bool,
    ) -> Result<(), TransportError> {
        self.paused.store(paused, Ordering::Relaxed);
        // On any failure the flag says paused: some partitions may be, and
        // the next receive resumes them (resuming one that is not paused
        // does nothing), while the next hold past the bound pauses again.
        let assignment = consumer.assignment().map_err(|err| {
            self.paused.store(true, Ordering::Relaxed);
            TransportError::Unavailable(format!("assignment: {err}"))
        })?;
        if assignment.count() == 0 {
            return Ok(());
        }
        let set = if paused {
            consumer.pause(&assignment)
        } else {
            consumer.resume(&assignment)
        };
        set.map_err(|err| {
            self.paused.store(true, Ordering::Relaxed);
            TransportError::Unavailable(format!("pause or resume: {err}"))
        })
    }

    fn consumer(&self) -> Result<&Arc<StreamConsumer<RebalanceContext>>, TransportError> {
        self.consumer
            .as_ref()
            .ok_or_else(|| TransportError::Refused("subscriber is closed".into()))
    }

    fn convert(&mut self, message: &rdkafka::message::BorrowedMessage<'_>) -> Delivery {
        self.forget_revoked();
        let mut headers = Headers::new();
        if let Some(borrowed) = message.headers() {
            for header in borrowed.iter() {
                headers.insert(
                    header.key.to_owned(),
                    String::from_utf8_lossy(header.value.unwrap_or_default()).into_owned(),
                );
            }
        }
        let topic = message.topic().to_owned();
        let partition = message.partition();
        let offset = message.offset();
        self.epochs += 1;
        let fresh_epoch = self.epochs;
        let progress = self
            .progress
            .entry((topic.clone(), partition))
            .or_insert_with(|| PartitionProgress::new(fresh_epoch));
        if offset < progress.committable() {
            // Below what this member already acknowledged: the partition's
            // log started over (a broker that lost it, a topic deleted and
            // re-created). Track the new log from here; never commit the old
            // log's offsets against it.
            tracing::warn!(%topic, partition, offset, was = progress.committable(),
                "kafka partition offsets went backwards (its log started over); offset tracking restarted");
            *progress = PartitionProgress::new(fresh_epoch);
        }
        let epoch = progress.epoch;
        progress.next = progress.next.max(offset + 1);
        let delivery = Delivery {
            topic: topic.clone(),
            key: message
                .key()
                .map(|key| String::from_utf8_lossy(key).into_owned()),
            payload: message.payload().unwrap_or_default().to_vec(),
            headers,
            broker_message_id: format!("{topic}/{partition}@{offset}"),
            redelivered: false,
            receipt: Receipt(ReceiptInner::Kafka {
                topic,
                partition,
                offset,
                epoch,
            }),
        };
        progress.unacked.insert(
            offset,
            Delivery {
                redelivered: true,
                ..delivery.clone()
            },
        );
        delivery
    }

    /// Hand `receipts`' deliveries out again, first, on the next receive.
    /// Kafka cannot redeliver one message, and leaving it unacknowledged
    /// would hold the partition's committed offset below it until this
    /// member stops: every wake-up acknowledged after it would come again
    /// to the next member. A delivery of a partition revoked since (or of
    /// an earlier tracking of it) is not kept: the partition's next holder
    /// reads it again from the committed offset.
    fn requeue(&mut self, receipts: &[Receipt]) {
        self.forget_revoked();
        for receipt in receipts.iter().rev() {
            if let Some((key, offset)) = self.tracked(receipt)
                && let Some(delivery) = self.progress[&key].unacked.get(&offset)
                && !self
                    .held
                    .iter()
                    .any(|held| held.receipt == delivery.receipt)
            {
                // Once: a receipt given back twice before it came again is
                // still one delivery.
                self.held.push_front(delivery.clone());
            }
        }
    }

    /// The partition and offset `receipt` names, if it belongs to this
    /// member's current tracking of that partition (not to one revoked
    /// since, nor to a log that started over).
    fn tracked(&self, receipt: &Receipt) -> Option<((String, i32), i64)> {
        #[allow(irrefutable_let_patterns)]
        let ReceiptInner::Kafka {
            topic,
            partition,
            offset,
            epoch,
        } = &receipt.0
        else {
            return None;
        };
        let key = (topic.clone(), *partition);
        (self.progress.get(&key)?.epoch == *epoch).then_some((key, *offset))
    }

    /// Mark `receipts` acknowledged; returns the offsets now committable.
    fn settle(&mut self, receipts: &[Receipt]) -> Result<TopicPartitionList, TransportError> {
        self.forget_revoked();
        let mut touched = HashSet::new();
        for receipt in receipts {
            if let Some((key, offset)) = self.tracked(receipt)
                && let Some(progress) = self.progress.get_mut(&key)
            {
                progress.unacked.remove(&offset);
                touched.insert(key);
            }
        }
        let mut list = TopicPartitionList::new();
        for key in touched {
            let committable = self.progress[&key].committable();
            list.add_partition_offset(&key.0, key.1, Offset::Offset(committable))
                .map_err(|err| TransportError::Refused(err.to_string()))?;
        }
        Ok(list)
    }
}

#[async_trait]
impl Subscriber for KafkaSubscriber {
    async fn receive(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, TransportError> {
        let consumer = self.consumer()?.clone();
        self.forget_revoked();
        if self.paused.load(Ordering::Relaxed)
            && let Err(err) = self.set_paused(&consumer, false)
        {
            // What was held is still returned, and the consumer still
            // polled below (it answers the group); the next receive
            // resumes again.
            tracing::warn!(topic = %self.topic, error = %err, "cannot resume kafka partitions; retrying");
        }
        if !self.held.is_empty() {
            let take = max.min(self.held.len());
            return Ok(self.held.drain(..take).collect());
        }
        let mut deliveries = Vec::new();
        match tokio::time::timeout(wait, consumer.recv()).await {
            Err(_) => {
                self.rewind_positions_past_the_end(&consumer);
                return Ok(deliveries);
            }
            Ok(Err(err)) => return Err(TransportError::Unavailable(err.to_string())),
            Ok(Ok(message)) => deliveries.push(self.convert(&message)),
        }
        while deliveries.len() < max {
            match consumer.recv().now_or_never() {
                Some(Ok(message)) => deliveries.push(self.convert(&message)),
                Some(Err(err)) => {
                    tracing::warn!(error = %err, topic = %self.topic, "kafka receive error");
                    break;
                }
                None => break,
            }
        }
        Ok(deliveries)
    }

    /// Keep polling the consumer, which is what lets it take part in its
    /// group's rebalances, and keep what arrives (tracked, so no offset past
    /// it is committed) for the next receive, up to [`HELD_MAX`]; then pause
    /// the partitions. librdkafka drops what it had fetched or queued for a
    /// paused partition and fetches it again from the position once
    /// resumed.
    async fn hold(&mut self, wait: Duration) -> Result<(), TransportError> {
        let consumer = self.consumer()?.clone();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Paused again on every turn past the bound: a partition the
            // rebalance callback failed to pause would otherwise keep
            // filling `held` for as long as the slots stay busy.
            if self.held.len() >= HELD_MAX {
                self.set_paused(&consumer, true)?;
            }
            match tokio::time::timeout_at(deadline, consumer.recv()).await {
                Err(_) => return Ok(()),
                Ok(Err(err)) => {
                    // Most consumer errors pass (librdkafka reconnects by
                    // itself); keep polling, which is the point of a hold.
                    tracing::warn!(error = %err, topic = %self.topic, "kafka error while holding");
                    tokio::time::sleep_until(
                        deadline.min(tokio::time::Instant::now() + Duration::from_millis(100)),
                    )
                    .await;
                }
                Ok(Ok(message)) => {
                    let delivery = self.convert(&message);
                    self.held.push_back(delivery);
                }
            }
        }
    }

    async fn ack(&mut self, receipts: &[Receipt]) -> Result<(), TransportError> {
        let list = self.settle(receipts)?;
        if list.count() > 0 {
            self.consumer()?
                .commit(&list, CommitMode::Async)
                .map_err(|err| TransportError::Unavailable(format!("commit: {err}")))?;
        }
        Ok(())
    }

    async fn nack(&mut self, receipts: &[Receipt], requeue: bool) -> Result<(), TransportError> {
        if requeue {
            self.requeue(receipts);
            Ok(())
        } else {
            self.ack(receipts).await
        }
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.forget_revoked();
        let Some(consumer) = self.consumer.take() else {
            return Ok(());
        };
        let mut list = TopicPartitionList::new();
        for ((topic, partition), progress) in &self.progress {
            list.add_partition_offset(topic, *partition, Offset::Offset(progress.committable()))
                .map_err(|err| TransportError::Refused(err.to_string()))?;
        }
        // A synchronous commit and the consumer's close both block.
        tokio::task::spawn_blocking(move || {
            let committed = if list.count() > 0 {
                consumer.commit(&list, CommitMode::Sync)
            } else {
                Ok(())
            };
            consumer.unsubscribe();
            drop(consumer);
            committed
        })
        .await
        .map_err(|err| TransportError::Unavailable(err.to_string()))?
        .map_err(|err| TransportError::Unavailable(format!("final commit: {err}")))
    }
}
