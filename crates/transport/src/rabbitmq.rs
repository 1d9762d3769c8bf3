//! RabbitMQ through lapin: one durable queue per destination on the default
//! exchange, persistent messages, publisher confirms; a prefetch-bounded
//! consumer with manual acks. Both sides reconnect by themselves after the
//! broker restarts.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, Consumer, ErrorKind,
};
use tokio::sync::{Mutex, MutexGuard};

use crate::{
    Capabilities, Delivery, Envelope, Headers, PublishError, Receipt, ReceiptInner,
    SubscribeOptions, Subscriber, Transport, TransportError, check_size, validate_topic,
};

/// AMQP short strings (queue names) hold at most 255 bytes.
const MAX_QUEUE_NAME: usize = 255;

/// Settings for [`RabbitTransport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RabbitConfig {
    /// AMQP URL, e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`.
    pub url: String,
    /// Largest message accepted (RabbitMQ's own ceiling is far higher; large
    /// messages hurt a wake-up broker, so we refuse them early).
    pub max_message_bytes: usize,
    /// Persistent messages (delivery mode 2). A topic that carries only job
    /// wake-ups may turn this off: the reconciler re-creates lost wake-ups.
    pub persistent: bool,
    /// How long to wait to connect, for publisher confirms, and, around a
    /// hold, to close the consuming channel and open one again on the
    /// connection the hold kept.
    pub timeout: Duration,
    /// Publishing sessions (a connection and a confirm-mode channel each)
    /// the transport keeps. A publish waits for the broker's confirms on
    /// the session it holds, so with one session every relay task and lane
    /// takes turns: an urgent lane's few wake-ups waited behind a bulk
    /// lane's thousand-message batch and its confirms. Publishes running
    /// at once beyond this number wait for a session.
    pub publish_sessions: usize,
}

impl RabbitConfig {
    /// Defaults for `url`: 4 MiB messages, persistent, 10 s timeout, four
    /// publishing sessions (a relay's drain task, one by default, plus a
    /// lane or two of its own, with room for more drain tasks).
    pub fn new(url: impl Into<String>) -> Self {
        RabbitConfig {
            url: url.into(),
            max_message_bytes: 4 * 1024 * 1024,
            persistent: true,
            timeout: Duration::from_secs(10),
            publish_sessions: 4,
        }
    }

    /// The broker's host, port and vhost from `url`, without the user and
    /// password (the URL itself when it does not parse: lapin will say why).
    pub fn address(&self) -> String {
        match self.url.parse::<lapin::uri::AMQPUri>() {
            Ok(uri) => format!(
                "{}:{} (vhost {})",
                uri.authority.host, uri.authority.port, uri.vhost
            ),
            Err(_) => "an AMQP URL that does not parse".to_owned(),
        }
    }
}

/// A connection and a confirm-mode channel, with the queues declared on it.
struct Session {
    connection: Connection,
    channel: Channel,
    declared: HashSet<String>,
}

impl Session {
    async fn open(config: &RabbitConfig) -> Result<Self, String> {
        let connect = Connection::connect(&config.url, ConnectionProperties::default());
        let connection = tokio::time::timeout(config.timeout, connect)
            .await
            .map_err(|_| format!("connecting timed out after {:?}", config.timeout))?
            .map_err(|err| format!("cannot connect: {err}"))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|err| format!("cannot open a channel: {err}"))?;
        Ok(Session {
            connection,
            channel,
            declared: HashSet::new(),
        })
    }

    /// A session whose channel is in confirm mode.
    async fn open_for_publishing(config: &RabbitConfig) -> Result<Self, String> {
        let session = Session::open(config).await?;
        match enable_confirms(&session.channel).await {
            Ok(()) => Ok(session),
            Err(reason) => {
                session.close(config.timeout).await;
                Err(reason)
            }
        }
    }

    async fn declare(&mut self, queue: &str) -> Result<(), DeclareFailure> {
        if self.declared.contains(queue) {
            return Ok(());
        }
        self.channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|err| {
                let reason = format!("cannot declare queue {queue}: {err}");
                if err.is_amqp_soft_error() {
                    DeclareFailure::Refused(reason)
                } else {
                    DeclareFailure::Broken(reason)
                }
            })?;
        self.declared.insert(queue.to_owned());
        Ok(())
    }

    /// A confirm-mode channel in place of one the broker closed, on the
    /// same connection.
    async fn replace_channel(&mut self) -> Result<(), String> {
        let channel = self
            .connection
            .create_channel()
            .await
            .map_err(|err| format!("cannot open a channel: {err}"))?;
        enable_confirms(&channel).await?;
        self.channel = channel;
        Ok(())
    }

    /// A session on a connection already open (one a holding subscriber
    /// kept); the connection is closed if no channel can be opened on it.
    async fn reopen(connection: Connection) -> Result<Self, String> {
        match connection.create_channel().await {
            Ok(channel) => Ok(Session {
                connection,
                channel,
                declared: HashSet::new(),
            }),
            Err(err) => {
                let _ = connection.close(200, "bye".into()).await;
                Err(format!("cannot open a channel: {err}"))
            }
        }
    }

    /// Close the channel, then the connection, waiting at most `within`
    /// for the broker's answers: on a connection whose network died they
    /// never come, and lapin would wait until it misses the broker's
    /// heartbeats (a minute or more), holding up whoever closes. A session
    /// not closed in time is dropped; the broker ends the connection once
    /// it notices, and requeues what the session held.
    async fn close(self, within: Duration) {
        let close = async {
            let _ = self.channel.close(200, "bye".into()).await;
            let _ = self.connection.close(200, "bye".into()).await;
        };
        if tokio::time::timeout(within, close).await.is_err() {
            tracing::warn!(timeout = ?within, "rabbitmq: a session did not close in time; dropped");
        }
    }
}

/// Put a publishing channel in confirm mode.
async fn enable_confirms(channel: &Channel) -> Result<(), String> {
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|err| format!("cannot enable publisher confirms: {err}"))
}

/// Why a queue could not be declared.
enum DeclareFailure {
    /// The broker refused this queue with a channel error: no permission
    /// for the name, a reserved (`amq.`) or exclusive name, a queue of that
    /// name with other settings. Nothing is wrong with the connection, and
    /// retrying will not help; the broker has closed the channel.
    Refused(String),
    /// The session failed.
    Broken(String),
}

impl DeclareFailure {
    fn into_reason(self) -> String {
        match self {
            DeclareFailure::Refused(reason) | DeclareFailure::Broken(reason) => reason,
        }
    }
}

/// How publishing a batch on one session ended.
enum SessionOutcome {
    /// Every message of the batch has its result.
    Done,
    /// The broker refused a destination: its messages are rejected, and the
    /// channel must be replaced before the others are published.
    DestinationRefused(String),
    /// The session broke: every message not yet confirmed is unavailable.
    Broken(String),
}

/// Publishes to RabbitMQ with publisher confirms.
pub struct RabbitTransport {
    config: RabbitConfig,
    /// The publishing sessions; each `None` until first used or after a
    /// failure, so that the next publish on it reconnects.
    publishers: Vec<Mutex<Option<Session>>>,
    /// Which busy session the next publish waits for, when all are busy.
    next_publisher: AtomicUsize,
}

impl RabbitTransport {
    /// A transport; connects on first use.
    pub fn new(config: RabbitConfig) -> Self {
        let publishers = (0..config.publish_sessions.max(1))
            .map(|_| Mutex::new(None))
            .collect();
        RabbitTransport {
            config,
            publishers,
            next_publisher: AtomicUsize::new(0),
        }
    }

    /// The first publishing session no other publish holds (so a relay
    /// that publishes one batch at a time keeps a single connection), or,
    /// when every one is busy, the next in turn once it is free.
    async fn publisher(&self) -> MutexGuard<'_, Option<Session>> {
        for publisher in &self.publishers {
            if let Ok(guard) = publisher.try_lock() {
                return guard;
            }
        }
        let turn = self.next_publisher.fetch_add(1, Ordering::Relaxed);
        self.publishers[turn % self.publishers.len()].lock().await
    }

    /// The session failed: drop it (the next publish reconnects) and report
    /// every message without a result unavailable.
    async fn give_up(
        &self,
        guard: &mut MutexGuard<'_, Option<Session>>,
        results: &mut [Option<Result<(), PublishError>>],
        reason: String,
    ) {
        tracing::warn!(%reason, "rabbitmq publishing session failed; reconnecting on next publish");
        if let Some(session) = guard.take() {
            session.close(self.config.timeout).await;
        }
        for result in results.iter_mut().filter(|r| r.is_none()) {
            *result = Some(Err(PublishError::Unavailable(reason.clone())));
        }
    }

    fn properties(&self, envelope: &Envelope) -> BasicProperties {
        let mut headers = FieldTable::default();
        for (name, value) in &envelope.headers {
            headers.insert(
                name.as_str().into(),
                AMQPValue::LongString(value.as_str().into()),
            );
        }
        if let Some(key) = &envelope.key {
            headers.insert(
                KEY_HEADER.into(),
                AMQPValue::LongString(key.as_str().into()),
            );
        }
        let mut properties = BasicProperties::default()
            .with_message_id(envelope.outbox_id.to_string().into())
            .with_headers(headers);
        if let Some(content_type) = envelope.headers.get(crate::header::CONTENT_TYPE) {
            properties = properties.with_content_type(content_type.as_str().into());
        }
        if self.config.persistent {
            properties = properties.with_delivery_mode(2);
        }
        properties
    }

    /// Publish the messages of a batch that have no result yet. Every
    /// destination is declared before anything is published, so that one the
    /// broker refuses (it closes the channel) leaves no message of the batch
    /// in flight on that channel.
    async fn publish_on(
        &self,
        session: &mut Session,
        batch: &[Envelope],
        results: &mut [Option<Result<(), PublishError>>],
    ) -> SessionOutcome {
        for index in 0..batch.len() {
            if results[index].is_some() {
                continue;
            }
            let topic = &batch[index].topic;
            match session.declare(topic).await {
                Ok(()) => {}
                Err(DeclareFailure::Refused(reason)) => {
                    for (result, envelope) in results.iter_mut().zip(batch) {
                        if result.is_none() && envelope.topic == *topic {
                            *result = Some(Err(PublishError::Rejected(reason.clone())));
                        }
                    }
                    return SessionOutcome::DestinationRefused(reason);
                }
                Err(DeclareFailure::Broken(reason)) => return SessionOutcome::Broken(reason),
            }
        }
        let unpublished: Vec<usize> = (0..batch.len())
            .filter(|&index| results[index].is_none())
            .collect();
        let channel = &session.channel;
        let published = sent_in_order(unpublished.iter().map(|&index| {
            let envelope = &batch[index];
            channel.basic_publish(
                "".into(),
                envelope.topic.as_str().into(),
                // Mandatory: a message no queue takes (the queue deleted
                // behind this session's back, which still counts it as
                // declared) comes back with its confirm instead of being
                // confirmed and dropped.
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &envelope.payload,
                self.properties(envelope),
            )
        }))
        .await;
        let mut confirms = Vec::with_capacity(published.len());
        for (index, publish) in unpublished.into_iter().zip(published) {
            match publish {
                Ok(confirm) => confirms.push((index, confirm)),
                Err(err) => return SessionOutcome::Broken(format!("publish failed: {err}")),
            }
        }
        for (index, confirm) in confirms {
            let confirmation = match tokio::time::timeout(self.config.timeout, confirm).await {
                Err(_) => {
                    return SessionOutcome::Broken(format!(
                        "no publisher confirm within {:?}",
                        self.config.timeout
                    ));
                }
                Ok(Err(err)) => {
                    return SessionOutcome::Broken(format!("publisher confirm failed: {err}"));
                }
                Ok(Ok(confirmation)) => confirmation,
            };
            results[index] = Some(match confirmation {
                Confirmation::Ack(None) => Ok(()),
                Confirmation::Ack(Some(_returned)) => {
                    let topic = &batch[index].topic;
                    // Declared again by the next publish to it.
                    session.declared.remove(topic);
                    Err(PublishError::Unavailable(format!(
                        "no queue {topic} took the message (deleted since this session declared it?)"
                    )))
                }
                Confirmation::Nack(_) => Err(PublishError::Unavailable(
                    "the broker nacked the message".into(),
                )),
                Confirmation::NotRequested => Err(PublishError::Unavailable(
                    "channel is not in confirm mode".into(),
                )),
            });
        }
        SessionOutcome::Done
    }
}

/// Run channel operations (publishes, acks, nacks) started in the order
/// given, and their results in that order. Each operation queues its frames
/// on the channel when first polled and then waits for the connection's
/// I/O loop to write them: awaited one after another, a batch of n waits
/// for that loop n times, on a machine where it competes for the same
/// cores. Started all first, in order (so the broker sees them as if
/// awaited in turn: per-key order and delivery tags hold), they are
/// written together and waited for once.
async fn sent_in_order<F: std::future::Future>(
    operations: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut started = Vec::new();
    for operation in operations {
        let mut operation = Box::pin(operation);
        let first = futures::poll!(operation.as_mut());
        started.push((operation, first));
    }
    let mut outputs = Vec::with_capacity(started.len());
    for (operation, first) in started {
        outputs.push(match first {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => operation.await,
        });
    }
    outputs
}

/// Header carrying the message key (AMQP has no key of its own).
const KEY_HEADER: &str = "jobwire-key";

#[async_trait]
impl Transport for RabbitTransport {
    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    fn address(&self) -> String {
        self.config.address()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            nack_requeues: true,
            // One queue delivers in publish order to a single consumer.
            per_key_order: true,
            max_message_bytes: self.config.max_message_bytes,
        }
    }

    async fn check(&self) -> Result<(), TransportError> {
        // A connection and a channel of its own: the login is what a wrong
        // password or vhost fails.
        let session = Session::open(&self.config)
            .await
            .map_err(TransportError::Unavailable)?;
        session.close(self.config.timeout).await;
        Ok(())
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Result<(), PublishError>> {
        let mut results: Vec<Option<Result<(), PublishError>>> = batch
            .iter()
            .map(|envelope| {
                validate_topic(&envelope.topic, MAX_QUEUE_NAME)
                    .and_then(|()| check_size(envelope, self.config.max_message_bytes))
                    .err()
                    .map(Err)
            })
            .collect();
        if results.iter().any(Option::is_none) {
            let mut guard = self.publisher().await;
            // Each refused destination settles at least one message, so this
            // ends; the other destinations of the batch are published on a
            // fresh channel.
            while results.iter().any(Option::is_none) {
                if guard.is_none() {
                    match Session::open_for_publishing(&self.config).await {
                        Ok(session) => *guard = Some(session),
                        Err(reason) => {
                            self.give_up(&mut guard, &mut results, reason).await;
                            break;
                        }
                    }
                }
                let session = guard.as_mut().expect("a session was opened above");
                match self.publish_on(session, batch, &mut results).await {
                    SessionOutcome::Done => break,
                    SessionOutcome::DestinationRefused(reason) => {
                        tracing::warn!(%reason, "rabbitmq refused a destination; its messages are rejected");
                        if let Err(reason) = session.replace_channel().await {
                            self.give_up(&mut guard, &mut results, reason).await;
                            break;
                        }
                    }
                    SessionOutcome::Broken(reason) => {
                        self.give_up(&mut guard, &mut results, reason).await;
                        break;
                    }
                }
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
        validate_topic(topic, MAX_QUEUE_NAME)
            .map_err(|err| TransportError::Refused(err.to_string()))?;
        let mut subscriber = RabbitSubscriber {
            config: self.config.clone(),
            topic: topic.to_owned(),
            prefetch: options.prefetch,
            live: None,
            kept: None,
            connections_opened: 0,
            epoch: 0,
        };
        subscriber
            .connect()
            .await
            .map_err(TransportError::Unavailable)?;
        Ok(Box::new(subscriber))
    }

    async fn close(&self) -> Result<(), TransportError> {
        for publisher in &self.publishers {
            if let Some(session) = publisher.lock().await.take() {
                session.close(self.config.timeout).await;
            }
        }
        Ok(())
    }

    async fn purge(&self, topic: &str) -> Result<Option<u64>, TransportError> {
        let session = Session::open(&self.config)
            .await
            .map_err(TransportError::Unavailable)?;
        let purged = session
            .channel
            .queue_purge(topic.into(), QueuePurgeOptions::default())
            .await
            .map_err(|err| TransportError::Refused(format!("purge {topic}: {err}")));
        session.close(self.config.timeout).await;
        Ok(Some(u64::from(purged?)))
    }

    async fn delete_topic(&self, topic: &str) -> Result<(), TransportError> {
        // A session of its own, as for `purge`: a refused request closes the
        // channel it was sent on, and that must not be the publisher's.
        // RabbitMQ answers delete-ok for a missing queue; the AMQP 0-9-1
        // spec (and other brokers) say 404 NOT_FOUND, which is the same
        // outcome here.
        let session = Session::open(&self.config)
            .await
            .map_err(TransportError::Unavailable)?;
        let deleted = session
            .channel
            .queue_delete(
                topic.into(),
                QueueDeleteOptions {
                    if_unused: false,
                    if_empty: false,
                    ..QueueDeleteOptions::default()
                },
            )
            .await;
        session.close(self.config.timeout).await;
        // Forget the declaration even when the delete failed halfway: the
        // next publish declaring again costs one round trip, while a
        // publish to a queue that is gone comes back unroutable (and fails
        // its pass).
        for publisher in &self.publishers {
            if let Some(session) = publisher.lock().await.as_mut() {
                session.declared.remove(topic);
            }
        }
        match deleted {
            Ok(_) => Ok(()),
            Err(err) if is_not_found(&err) => Ok(()),
            Err(err) if matches!(err.kind(), ErrorKind::ProtocolError(_)) => {
                Err(TransportError::Refused(format!("delete {topic}: {err}")))
            }
            Err(err) => Err(TransportError::Unavailable(format!(
                "delete {topic}: {err}"
            ))),
        }
    }
}

/// Whether the broker answered 404 NOT_FOUND (the queue is not there).
fn is_not_found(err: &lapin::Error) -> bool {
    matches!(
        err.kind(),
        ErrorKind::ProtocolError(amqp)
            if matches!(amqp.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND))
    )
}

struct LiveConsumer {
    session: Session,
    consumer: Consumer,
}

/// Consumes one queue with manual acks.
struct RabbitSubscriber {
    config: RabbitConfig,
    topic: String,
    prefetch: u16,
    live: Option<LiveConsumer>,
    /// The connection a hold kept, its consuming channel closed: the next
    /// receive opens a channel on it instead of connecting again.
    kept: Option<Connection>,
    /// How many connections this subscriber has opened: its tests check
    /// that a hold reuses the one it had.
    connections_opened: u64,
    /// Raised on every new consuming channel: delivery tags are per
    /// channel, so receipts from an older channel must not be acked on a
    /// newer one (the broker requeued those deliveries when the old channel
    /// closed).
    epoch: u64,
}

impl RabbitSubscriber {
    async fn connect(&mut self) -> Result<(), String> {
        let reopened = match self.kept.take() {
            Some(connection) => self.reopen_kept(connection).await,
            None => None,
        };
        let mut session = match reopened {
            Some(session) => session,
            None => {
                let session = Session::open(&self.config).await?;
                self.connections_opened += 1;
                session
            }
        };
        session
            .declare(&self.topic)
            .await
            .map_err(DeclareFailure::into_reason)?;
        session
            .channel
            .basic_qos(self.prefetch.max(1), BasicQosOptions { global: false })
            .await
            .map_err(|err| format!("cannot set prefetch: {err}"))?;
        let consumer = session
            .channel
            .basic_consume(
                self.topic.as_str().into(),
                format!("jobwire-{}", uuid::Uuid::new_v4().simple()).into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|err| format!("cannot consume {}: {err}", self.topic))?;
        self.epoch += 1;
        self.live = Some(LiveConsumer { session, consumer });
        Ok(())
    }

    async fn disconnect(&mut self) {
        if let Some(live) = self.live.take() {
            live.session.close(self.config.timeout).await;
        }
        if let Some(connection) = self.kept.take() {
            // Bounded as a session's close is.
            let close = connection.close(200, "bye".into());
            let _ = tokio::time::timeout(self.config.timeout, close).await;
        }
    }

    /// Close the consuming channel, which returns every unacknowledged
    /// delivery to the queue, and keep the connection for the next receive.
    /// Bounded: on a connection whose network died the close would wait
    /// until lapin misses its heartbeats. A channel not closed in time is
    /// dropped with its connection (the broker requeues what it held when
    /// the connection ends), and the next receive connects again.
    async fn give_back(&mut self) {
        if let Some(live) = self.live.take() {
            let close = live.session.channel.close(200, "holding".into());
            match tokio::time::timeout(self.config.timeout, close).await {
                Ok(_) => self.kept = Some(live.session.connection),
                Err(_) => tracing::warn!(
                    topic = %self.topic,
                    timeout = ?self.config.timeout,
                    "rabbitmq: the consuming channel did not close for a hold; dropping its connection"
                ),
            }
        }
    }

    /// A session on the connection a hold kept, or `None` (with the
    /// reason logged) when the next receive must connect again. Opening the
    /// channel is bounded by the transport's timeout, as connecting is: a
    /// connection whose network died during the hold still reads as
    /// connected until lapin misses its heartbeats. A connection given up
    /// here is dropped, which lapin closes once nothing uses it.
    async fn reopen_kept(&self, connection: Connection) -> Option<Session> {
        if !connection.status().connected() {
            tracing::warn!(
                topic = %self.topic,
                "rabbitmq: the connection kept during a hold was lost; connecting again"
            );
            return None;
        }
        match tokio::time::timeout(self.config.timeout, Session::reopen(connection)).await {
            Ok(Ok(session)) => Some(session),
            Ok(Err(reason)) => {
                tracing::warn!(
                    %reason,
                    topic = %self.topic,
                    "rabbitmq: the connection kept during a hold is unusable; connecting again"
                );
                None
            }
            Err(_) => {
                tracing::warn!(
                    topic = %self.topic,
                    timeout = ?self.config.timeout,
                    "rabbitmq: no channel from the connection kept during a hold; connecting again"
                );
                None
            }
        }
    }

    fn convert(&self, delivery: lapin::message::Delivery) -> Delivery {
        let mut headers = Headers::new();
        let mut key = None;
        if let Some(table) = delivery.properties.headers() {
            for (name, value) in table.inner() {
                let text = match value {
                    AMQPValue::LongString(text) => {
                        String::from_utf8_lossy(text.as_bytes()).into_owned()
                    }
                    AMQPValue::ShortString(text) => text.as_str().to_owned(),
                    other => format!("{other:?}"),
                };
                if name.as_str() == KEY_HEADER {
                    key = Some(text);
                } else {
                    headers.insert(name.as_str().to_owned(), text);
                }
            }
        }
        let broker_message_id = delivery
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.as_str().to_owned())
            .unwrap_or_else(|| format!("tag-{}", delivery.delivery_tag));
        Delivery {
            topic: self.topic.clone(),
            key,
            payload: delivery.data,
            headers,
            broker_message_id,
            redelivered: delivery.redelivered,
            receipt: Receipt(ReceiptInner::Rabbit {
                delivery_tag: delivery.delivery_tag,
                channel_epoch: self.epoch,
            }),
        }
    }

    /// Delivery tags of `receipts` that belong to the live channel.
    fn live_tags(&self, receipts: &[Receipt]) -> Vec<u64> {
        receipts
            .iter()
            .filter_map(|receipt| match receipt.0 {
                ReceiptInner::Rabbit {
                    delivery_tag,
                    channel_epoch,
                } if channel_epoch == self.epoch => Some(delivery_tag),
                _ => None,
            })
            .collect()
    }
}

#[async_trait]
impl Subscriber for RabbitSubscriber {
    async fn receive(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, TransportError> {
        if self.live.is_none() {
            self.connect().await.map_err(TransportError::Unavailable)?;
        }
        let live = self.live.as_mut().expect("connected above");
        let first = match tokio::time::timeout(wait, live.consumer.next()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(next) => next,
        };
        let mut raw = Vec::new();
        let mut broken = None;
        match first {
            Some(Ok(delivery)) => raw.push(delivery),
            Some(Err(err)) => broken = Some(err.to_string()),
            None => broken = Some("consumer cancelled by the broker".into()),
        }
        while broken.is_none() && raw.len() < max {
            match live.consumer.next().now_or_never() {
                Some(Some(Ok(delivery))) => raw.push(delivery),
                Some(Some(Err(err))) => broken = Some(err.to_string()),
                Some(None) => broken = Some("consumer cancelled by the broker".into()),
                None => break,
            }
        }
        let deliveries: Vec<Delivery> = raw.into_iter().map(|d| self.convert(d)).collect();
        if let Some(reason) = broken {
            tracing::warn!(%reason, topic = %self.topic, "rabbitmq consumer lost; reconnecting on next receive");
            self.disconnect().await;
            if deliveries.is_empty() {
                return Err(TransportError::Unavailable(reason));
            }
        }
        Ok(deliveries)
    }

    /// Give back what the broker pushed ahead and no slot can take: the
    /// broker sends a consumer up to its prefetch of deliveries before they
    /// are asked for, and those would wait here, for as long as this
    /// worker's jobs run, while another worker of the queue sits idle.
    /// Closing the consuming channel returns every unacknowledged delivery
    /// to the queue at once (one received and not yet settled comes again,
    /// as after any reconnect); the next receive opens a channel on the same
    /// connection. A connection per hold would show as connection churn in
    /// the broker's log and metrics, one open and close per busy spell.
    async fn hold(&mut self, wait: Duration) -> Result<(), TransportError> {
        self.give_back().await;
        tokio::time::sleep(wait).await;
        Ok(())
    }

    async fn ack(&mut self, receipts: &[Receipt]) -> Result<(), TransportError> {
        let tags = self.live_tags(receipts);
        let Some(live) = self.live.as_ref() else {
            return Ok(());
        };
        let channel = &live.session.channel;
        sent_in_order(
            tags.into_iter()
                .map(|tag| channel.basic_ack(tag, BasicAckOptions { multiple: false })),
        )
        .await
        .into_iter()
        .collect::<Result<(), _>>()
        .map_err(|err| TransportError::Unavailable(format!("ack failed: {err}")))
    }

    async fn nack(&mut self, receipts: &[Receipt], requeue: bool) -> Result<(), TransportError> {
        let tags = self.live_tags(receipts);
        let Some(live) = self.live.as_ref() else {
            return Ok(());
        };
        let channel = &live.session.channel;
        sent_in_order(tags.into_iter().map(|tag| {
            channel.basic_nack(
                tag,
                BasicNackOptions {
                    multiple: false,
                    requeue,
                },
            )
        }))
        .await
        .into_iter()
        .collect::<Result<(), _>>()
        .map_err(|err| TransportError::Unavailable(format!("nack failed: {err}")))
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        // Closing the channel returns every unacknowledged delivery.
        self.disconnect().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_names_host_port_and_vhost_but_no_credentials() {
        let config = RabbitConfig::new("amqp://jobs:s3cret@broker.internal:5673/prod");
        assert_eq!(config.address(), "broker.internal:5673 (vhost prod)");
        // The default port and the encoded default vhost.
        let config = RabbitConfig::new("amqp://jobs:s3cret@broker.internal/%2f");
        assert_eq!(config.address(), "broker.internal:5672 (vhost /)");
        let config = RabbitConfig::new("jobs:s3cret@broker.internal");
        assert!(!config.address().contains("s3cret"), "{}", config.address());
    }

    #[tokio::test]
    async fn a_publish_takes_a_session_no_other_publish_holds() {
        let mut config = RabbitConfig::new("amqp://127.0.0.1:1/%2f");
        config.publish_sessions = 2;
        let transport = RabbitTransport::new(config);
        let first = transport.publisher().await;
        // With a single session this would wait for `first` forever.
        let second = tokio::time::timeout(Duration::from_secs(5), transport.publisher())
            .await
            .expect("a second session was free");
        assert!(!std::ptr::eq(&*first, &*second));
        // Once free, the first session is the one taken again: a relay
        // publishing one batch at a time keeps a single connection.
        let first_address: *const Option<Session> = &*first;
        drop(first);
        let again = transport.publisher().await;
        assert!(std::ptr::eq(&*again, first_address));
    }

    /// A hold closes the consuming channel and keeps the connection: the
    /// next receive consumes on a new channel of it, so a worker that is
    /// busy now and then does not connect again each time; a kept
    /// connection lost meanwhile is replaced. Against the broker at
    /// `AMQP_URL` (default the local one), as the integration tests. The
    /// assertions come after the clean-up, so a failure leaves no queue.
    /// (The bounds on a connection whose network died are tests of their
    /// own, over a proxy that stalls it: `tests/rabbitmq.rs`.)
    #[tokio::test]
    async fn a_hold_keeps_the_connection_for_the_next_receive() {
        let url = std::env::var("AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
        let config = RabbitConfig::new(url);
        let topic = format!("unit.hold_keeps.{}", uuid::Uuid::new_v4().simple());
        let mut subscriber = RabbitSubscriber {
            config: config.clone(),
            topic: topic.clone(),
            prefetch: 4,
            live: None,
            kept: None,
            connections_opened: 0,
            epoch: 0,
        };
        let transport = RabbitTransport::new(config.clone());
        subscriber.connect().await.unwrap();
        subscriber.hold(Duration::from_millis(10)).await.unwrap();
        let consuming_while_held = subscriber.live.is_some();
        let kept = subscriber.kept.is_some();
        // A wake-up sent during the hold arrives on the new channel, and its
        // receipt acks there.
        let sent = transport
            .publish(&[crate::conformance::envelope(
                &topic,
                None,
                b"after the hold",
            )])
            .await;
        let received = subscriber.receive(1, Duration::from_secs(5)).await;
        let acked = match &received {
            Ok(deliveries) => subscriber
                .ack(&crate::conformance::receipts(deliveries))
                .await
                .is_ok(),
            Err(_) => false,
        };
        let after_one_hold = (subscriber.connections_opened, subscriber.epoch);

        // A kept connection that is gone by the next receive is replaced.
        subscriber.hold(Duration::from_millis(10)).await.unwrap();
        let kept_again = subscriber.kept.is_some();
        if let Some(connection) = subscriber.kept.as_ref() {
            let _ = connection.close(200, "gone".into()).await;
        }
        let received_after_loss = subscriber.receive(1, Duration::from_millis(100)).await;
        let after_loss = (subscriber.connections_opened, subscriber.epoch);

        subscriber.close().await.unwrap();
        let _ = transport.delete_topic(&topic).await;
        assert!(!consuming_while_held, "still consuming while held");
        assert!(kept, "the connection was not kept");
        assert!(sent.iter().all(Result::is_ok), "{sent:?}");
        let received = received.unwrap();
        assert_eq!(
            crate::conformance::payloads(&received),
            vec!["after the hold"]
        );
        assert!(acked, "the receipt did not ack on the new channel");
        assert_eq!(
            after_one_hold,
            (1, 2),
            "connected again, or not on a new channel"
        );
        assert!(kept_again, "the second hold kept no connection");
        assert!(received_after_loss.unwrap().is_empty());
        assert_eq!(after_loss, (2, 3), "the lost connection was not replaced");
    }
}
