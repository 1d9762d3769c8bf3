//! Apache Kafka (or any Kafka-protocol broker) through rdkafka: an idempotent
//! producer with `acks=all` keyed by the message key (per-key order through
//! the partition), an explicit ensure-topic step, and a consumer group whose
//! offsets are committed only up to the lowest unacknowledged delivery.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers as _, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
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
}

/// Publishes to Kafka.
pub struct KafkaTransport {
    shared: Arc<Shared>,
    producer: FutureProducer,
}

impl KafkaTransport {
    /// Create the producer and admin client (connections open lazily).
    pub fn new(config: KafkaConfig) -> Result<Self, TransportError> {
        let timeout_ms = config.timeout.as_millis().to_string();
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &config.bootstrap)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", &timeout_ms)
            .set("linger.ms", "2")
            .set(
                "message.max.bytes",
                (config.max_message_bytes + 64 * 1024).to_string(),
            )
            .create()
            .map_err(|err| TransportError::Refused(format!("producer config: {err}")))?;
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
            producer,
        })
    }
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

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // No per-message redelivery: the jobs table does retries.
            nack_requeues: false,
            per_key_order: true,
            max_message_bytes: self.shared.config.max_message_bytes,
        }
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Result<(), PublishError>> {
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
            match self.producer.send_result(record) {
                Ok(delivery) => pending.push((index, delivery)),
                Err((err, _)) => results[index] = Some(Err(classify(&err))),
            }
        }
        for (index, delivery) in pending {
            results[index] = Some(match delivery.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err((err, _))) => Err(classify(&err)),
                Err(_) => Err(PublishError::Unavailable(
                    "producer dropped the message".into(),
                )),
            });
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
        let consumer: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.shared.config.bootstrap)
            .set("group.id", &options.group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("session.timeout.ms", "10000")
            .set(
                "fetch.wait.max.ms",
                self.shared.config.fetch_wait.as_millis().to_string(),
            )
            .create()
            .map_err(|err| TransportError::Refused(format!("consumer config: {err}")))?;
        consumer
            .subscribe(&[topic])
            .map_err(|err| TransportError::Unavailable(format!("subscribe {topic}: {err}")))?;
        Ok(Box::new(KafkaSubscriber {
            consumer: Some(Arc::new(consumer)),
            topic: topic.to_owned(),
            progress: HashMap::new(),
        }))
    }

    async fn close(&self) -> Result<(), TransportError> {
        let producer = self.producer.clone();
        let timeout = self.shared.config.timeout;
        tokio::task::spawn_blocking(move || {
            use rdkafka::producer::Producer;
            producer.flush(timeout)
        })
        .await
        .map_err(|err| TransportError::Unavailable(err.to_string()))?
        .map_err(|err| TransportError::Unavailable(format!("flush: {err}")))
    }
}

/// Which offsets of a partition are received but not yet acknowledged.
#[derive(Default)]
struct PartitionProgress {
    unacked: BTreeSet<i64>,
    /// One past the highest offset received.
    next: i64,
}

impl PartitionProgress {
    /// The offset to commit: everything below it is acknowledged.
    fn committable(&self) -> i64 {
        self.unacked.first().copied().unwrap_or(self.next)
    }
}

struct KafkaSubscriber {
    consumer: Option<Arc<StreamConsumer>>,
    topic: String,
    progress: HashMap<(String, i32), PartitionProgress>,
}

impl KafkaSubscriber {
    fn consumer(&self) -> Result<&Arc<StreamConsumer>, TransportError> {
        self.consumer
            .as_ref()
            .ok_or_else(|| TransportError::Refused("subscriber is closed".into()))
    }

    fn convert(&mut self, message: &rdkafka::message::BorrowedMessage<'_>) -> Delivery {
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
        let progress = self.progress.entry((topic.clone(), partition)).or_default();
        progress.unacked.insert(offset);
        progress.next = progress.next.max(offset + 1);
        Delivery {
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
            }),
        }
    }

    /// Mark `receipts` acknowledged; returns the offsets now committable.
    fn settle(&mut self, receipts: &[Receipt]) -> Result<TopicPartitionList, TransportError> {
        let mut touched = HashSet::new();
        for receipt in receipts {
            #[allow(irrefutable_let_patterns)]
            if let ReceiptInner::Kafka {
                topic,
                partition,
                offset,
            } = &receipt.0
                && let Some(progress) = self.progress.get_mut(&(topic.clone(), *partition))
            {
                progress.unacked.remove(offset);
                touched.insert((topic.clone(), *partition));
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
        let mut deliveries = Vec::new();
        match tokio::time::timeout(wait, consumer.recv()).await {
            Err(_) => return Ok(deliveries),
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
            // Kafka cannot redeliver one message: leaving it unacknowledged
            // keeps the committed offset below it, so the next member of the
            // group (after a restart or rebalance) reads it again.
            Ok(())
        } else {
            self.ack(receipts).await
        }
    }

    async fn close(&mut self) -> Result<(), TransportError> {
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
