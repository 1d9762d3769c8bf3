//! jobwire-transport: how outbox rows reach a broker and how deliveries come
//! back.
//!
//! - [`Transport`] publishes [`Envelope`]s (the relay's side) and opens
//!   [`Subscriber`]s (the consumer's side).
//! - [`memory::MemoryTransport`] is an in-process implementation for unit
//!   tests and the embedded default; `rabbitmq`, `sqs` and `kafka` modules are
//!   behind cargo features of the same names.
//! - [`conformance`] is one suite of scenarios every implementation passes
//!   against its real broker.
//!
//! Delivery is **at least once** everywhere: a message may arrive more than
//! once, never zero times once `publish` said it was accepted. For jobwire's
//! job wake-ups that is all that is needed: the jobs table decides what runs.
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

pub mod conformance;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod memory;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "sqs")]
pub mod sqs;

/// Message headers: string keys to string values.
pub type Headers = BTreeMap<String, String>;

/// Header names jobwire sets or reads.
pub mod header {
    /// MIME type of the payload (`application/json` for outbox rows).
    pub const CONTENT_TYPE: &str = "content-type";
    /// W3C trace context, carried through when the outbox row has one (a
    /// job's wake-ups carry the span the job was enqueued in).
    pub const TRACEPARENT: &str = "traceparent";
    /// W3C vendor trace state, beside a traceparent.
    pub const TRACESTATE: &str = "tracestate";
    /// The `job_outbox.id` the message was relayed from.
    pub const OUTBOX_ID: &str = "jobwire-outbox-id";
    /// For job wake-ups: the job to claim.
    pub const JOB_ID: &str = "jobwire-job-id";
    /// For job wake-ups: the lease generation when the wake-up was written (a hint).
    pub const GENERATION: &str = "jobwire-generation";
    /// `wake-up` for job wake-ups.
    pub const KIND: &str = "jobwire-kind";
}

/// One message on its way to a broker: an outbox row, addressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The `job_outbox.id` it came from (also the SQS FIFO deduplication id).
    pub outbox_id: i64,
    /// The broker destination: queue (RabbitMQ, SQS) or topic (Kafka).
    pub topic: String,
    /// Partitioning / ordering key (Kafka key, SQS FIFO group id).
    pub key: Option<String>,
    /// The body, as stored (JSON text for outbox rows).
    pub payload: Vec<u8>,
    /// Headers, including [`header::OUTBOX_ID`].
    pub headers: Headers,
}

impl Envelope {
    /// Bytes this message puts on the wire: payload, key and headers.
    pub fn wire_size(&self) -> usize {
        self.payload.len()
            + self.key.as_ref().map_or(0, String::len)
            + self
                .headers
                .iter()
                .map(|(name, value)| name.len() + value.len())
                .sum::<usize>()
    }
}

/// A message received from a broker.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Where it came from.
    pub topic: String,
    /// Its key, where the broker carries one.
    pub key: Option<String>,
    /// The body, exactly as published.
    pub payload: Vec<u8>,
    /// Its headers.
    pub headers: Headers,
    /// The broker's id for this message (RabbitMQ message id, SQS message id,
    /// Kafka `partition@offset`).
    pub broker_message_id: String,
    /// Whether the broker says it delivered this message before.
    pub redelivered: bool,
    /// What acknowledges it.
    pub receipt: Receipt,
}

impl Delivery {
    /// The outbox id from the headers, if present and well-formed.
    pub fn outbox_id(&self) -> Option<i64> {
        self.headers.get(header::OUTBOX_ID)?.parse().ok()
    }
}

/// Opaque handle that acknowledges one delivery through the [`Subscriber`]
/// that received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt(pub(crate) ReceiptInner);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReceiptInner {
    Memory {
        delivery_id: u64,
    },
    #[cfg(feature = "rabbitmq")]
    Rabbit {
        delivery_tag: u64,
        channel_epoch: u64,
    },
    #[cfg(feature = "sqs")]
    Sqs {
        receipt_handle: String,
    },
    #[cfg(feature = "kafka")]
    Kafka {
        topic: String,
        partition: i32,
        offset: i64,
        /// The subscriber's tracking epoch of the partition when received.
        epoch: u64,
    },
}

/// What an implementation can do; scenarios that need a capability skip
/// themselves where it is missing instead of special-casing brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// `nack(requeue = true)` redelivers the message soon.
    pub nack_requeues: bool,
    /// Messages with the same key are delivered in publish order.
    pub per_key_order: bool,
    /// Largest message [`Envelope::wire_size`] accepted.
    pub max_message_bytes: usize,
}

/// Why publishing one message failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The broker could not be reached or did not confirm in time. Nothing
    /// is wrong with the message: retry later, it is not its fault.
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    /// The broker (or the transport, checking the broker's limits) refused
    /// this message: too large, invalid destination. Retrying is unlikely
    /// to help.
    #[error("message rejected: {0}")]
    Rejected(String),
}

/// Errors outside publishing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The broker could not be reached; retry later.
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    /// A request the broker refused (bad destination, bad receipt).
    #[error("broker refused the request: {0}")]
    Refused(String),
}

impl From<PublishError> for TransportError {
    /// For the setup steps that publishing and subscribing share (resolving
    /// or creating a destination).
    fn from(err: PublishError) -> Self {
        match err {
            PublishError::Rejected(text) => TransportError::Refused(text),
            PublishError::Unavailable(text) => TransportError::Unavailable(text),
        }
    }
}

/// How to subscribe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// Consumer group (Kafka): each topic is subscribed in a group of its
    /// own, `<group>.<topic>` (`kafka::group_for_topic`), whose members share
    /// the topic's partitions.
    pub group: String,
    /// Most unacknowledged deliveries in flight (RabbitMQ prefetch; an upper
    /// bound for the others).
    pub prefetch: u16,
    /// How long a received SQS message stays invisible to other consumers
    /// before it is redelivered unless acknowledged.
    pub visibility_timeout: Duration,
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        SubscribeOptions {
            group: "jobwire".into(),
            prefetch: 100,
            visibility_timeout: Duration::from_secs(30),
        }
    }
}

/// Publishes to a broker. Shared by the relay's tasks: implementations are
/// `Send + Sync` and reconnect by themselves after the broker comes back.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Short name for logs and metrics (`rabbitmq`, `sqs`, `kafka`, `memory`).
    fn name(&self) -> &'static str;

    /// Where the broker is, for logs and errors an operator reads: host and
    /// port (or endpoint, or region), never credentials. A transport that
    /// does not say is logged as the default's words.
    fn address(&self) -> String {
        "an address this transport does not report".to_owned()
    }

    /// What this implementation can do.
    fn capabilities(&self) -> Capabilities;

    /// Publish a batch. Returns one result per envelope, in order. `Ok` for
    /// an envelope means the broker **durably accepted** it (publisher
    /// confirm, SQS response, Kafka `acks=all`): after that a crash anywhere
    /// cannot lose it. Messages sharing a key are sent in batch order.
    /// Never drops a message silently: every failure is an `Err` for the
    /// messages it concerns.
    async fn publish(&self, batch: &[Envelope]) -> Vec<Result<(), PublishError>>;

    /// Open a subscriber on `topic`, creating the destination if needed.
    async fn subscribe(
        &self,
        topic: &str,
        options: &SubscribeOptions,
    ) -> Result<Box<dyn Subscriber>, TransportError>;

    /// Whether the broker can be reached and takes these credentials, with
    /// nothing published. A relay calls it when it starts, so a broker that
    /// is down or refuses the login is reported at once rather than at the
    /// first outbox row. The default (a transport with nothing to reach)
    /// has nothing to check.
    async fn check(&self) -> Result<(), TransportError> {
        Ok(())
    }

    /// Flush what is pending and release connections. Publishing after
    /// `close` fails with [`PublishError::Unavailable`] or reconnects,
    /// depending on the implementation.
    async fn close(&self) -> Result<(), TransportError>;

    /// Drop every message waiting on `topic` (an operator's purge). Returns
    /// how many were dropped where the broker says. Not every broker can:
    /// the default refuses.
    async fn purge(&self, topic: &str) -> Result<Option<u64>, TransportError> {
        Err(TransportError::Refused(format!(
            "{} cannot purge {topic}",
            self.name()
        )))
    }

    /// Delete the destination `topic` and everything queued on it (the
    /// RabbitMQ queue, the SQS queue, the Kafka topic with its partitions).
    /// Deleting one that does not exist is `Ok`, so cleaning up twice, or
    /// after a setup that never created it, is harmless.
    ///
    /// Meant for tests and tooling that make throwaway destinations; the
    /// relay and the consumer never call it, since a destination in service
    /// is the operator's to remove. Close subscribers on `topic` first: an
    /// open one may fail, or (where subscribing declares the destination)
    /// bring it back when it reconnects. Publishing to `topic` afterwards
    /// creates it afresh. Not every implementation can delete: the default
    /// refuses, as for [`Transport::purge`].
    async fn delete_topic(&self, topic: &str) -> Result<(), TransportError> {
        Err(TransportError::Refused(format!(
            "{} cannot delete {topic}",
            self.name()
        )))
    }
}

/// Receives deliveries from one topic. Owned by one consumer task.
///
/// A delivery that is not acknowledged is delivered again: after `nack`
/// with requeue (where [`Capabilities::nack_requeues`]), after `close`, or
/// when the subscriber dies (broker-side timeout, rebalance).
#[async_trait]
pub trait Subscriber: Send {
    /// Wait up to `wait` for deliveries; returns between 1 and `max` of
    /// them, or none when `wait` passed.
    async fn receive(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, TransportError>;

    /// Keep the subscription alive for `wait` while the caller can take no
    /// deliveries (every slot busy), taking none; returns once `wait` has
    /// passed (earlier only with an error). Whatever the
    /// broker hands over anyway is kept for the next
    /// [`receive`](Self::receive), or given back to the broker for other
    /// consumers (a delivery received and not yet settled may then come
    /// again). The default just waits; a Kafka group member must keep
    /// polling, or every rebalance of its group waits for it, and a RabbitMQ
    /// consumer gives back what the broker pushed ahead of its prefetch.
    async fn hold(&mut self, wait: Duration) -> Result<(), TransportError> {
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// Acknowledge: these deliveries are done and must not come back.
    async fn ack(&mut self, receipts: &[Receipt]) -> Result<(), TransportError>;

    /// Give deliveries back: redelivered soon when `requeue` (and the
    /// broker can), dropped otherwise.
    async fn nack(&mut self, receipts: &[Receipt], requeue: bool) -> Result<(), TransportError>;

    /// Stop receiving; unacknowledged deliveries go back to the broker.
    async fn close(&mut self) -> Result<(), TransportError>;
}

/// A destination name every broker accepts: 1 to `max_len` characters of
/// ASCII letters, digits, `.`, `_` and `-`.
pub fn validate_topic(topic: &str, max_len: usize) -> Result<(), PublishError> {
    if topic.is_empty() || topic.len() > max_len {
        return Err(PublishError::Rejected(format!(
            "destination name must be 1 to {max_len} characters, got {}",
            topic.len()
        )));
    }
    if let Some(bad) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(PublishError::Rejected(format!(
            "destination name {topic:?} contains {bad:?}; use letters, digits, '.', '_' and '-'"
        )));
    }
    Ok(())
}

/// Check a message against `max_bytes`.
pub fn check_size(envelope: &Envelope, max_bytes: usize) -> Result<(), PublishError> {
    let size = envelope.wire_size();
    if size > max_bytes {
        return Err(PublishError::Rejected(format!(
            "message of {size} bytes exceeds the limit of {max_bytes} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_are_checked() {
        assert!(validate_topic("jobwire.webhooks-1_a", 80).is_ok());
        assert!(matches!(
            validate_topic("", 80),
            Err(PublishError::Rejected(_))
        ));
        assert!(validate_topic("has space", 80).is_err());
        assert!(validate_topic(&"x".repeat(81), 80).is_err());
    }
}
