//! Amazon SQS through aws-sdk-sqs: SendMessageBatch (10 per call, 256 KiB
//! per call), long-poll ReceiveMessage, DeleteMessageBatch as ack,
//! visibility changes as nack. Standard or FIFO queues (FIFO: group id =
//! message key, deduplication id = outbox id). The endpoint is configurable,
//! so the same code talks to AWS or to a local emulator.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_config::timeout::TimeoutConfig;
use aws_credential_types::Credentials;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use futures::StreamExt;
use tokio::sync::Mutex;

use crate::{
    Capabilities, Delivery, Envelope, Headers, PublishError, Receipt, ReceiptInner,
    SubscribeOptions, Subscriber, Transport, TransportError,
};

/// SQS's limit for one message, body and attributes together, and for one
/// SendMessageBatch call.
pub const SQS_MAX_BYTES: usize = 262_144;
/// SQS's limit of entries per batch call.
const SQS_BATCH: usize = 10;
/// SendMessageBatch calls in flight at once for a standard queue: a relay
/// batch of 1,000 rows is 100 calls, and one after another they would
/// hold the relay's transaction open for 100 round trips.
const CHUNKS_IN_FLIGHT: usize = 16;
/// SQS's limit of message attributes per message.
const SQS_MAX_ATTRIBUTES: usize = 10;
/// Attribute carrying the message key on standard queues.
const KEY_ATTRIBUTE: &str = "jobwire-key";
/// SQS's longest long poll, in seconds.
const SQS_MAX_WAIT_SECONDS: u64 = 20;

/// Settings for [`SqsTransport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsConfig {
    /// Endpoint override (a local emulator); `None` for AWS itself.
    pub endpoint: Option<String>,
    /// AWS region.
    pub region: String,
    /// Static credentials (access key id, secret); `None` for the default chain.
    pub credentials: Option<(String, String)>,
    /// FIFO queues: every destination gets the `.fifo` suffix, per-key order,
    /// deduplication on the outbox id.
    pub fifo: bool,
    /// Per-request timeout.
    pub timeout: Duration,
}

impl SqsConfig {
    /// A local emulator at `endpoint` with the usual test credentials.
    pub fn local(endpoint: impl Into<String>) -> Self {
        SqsConfig {
            endpoint: Some(endpoint.into()),
            region: "us-east-1".into(),
            credentials: Some(("test".into(), "test".into())),
            fifo: false,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Publishes to SQS.
pub struct SqsTransport {
    client: Client,
    config: SqsConfig,
    queue_urls: Mutex<HashMap<String, String>>,
}

impl SqsTransport {
    /// Build the client (no request is sent yet).
    pub async fn new(config: SqsConfig) -> Self {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(aws_config::Region::new(config.region.clone()))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(3))
                    .operation_timeout(config.timeout)
                    .build(),
            );
        if let Some(endpoint) = &config.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some((key, secret)) = &config.credentials {
            loader = loader.credentials_provider(Credentials::new(
                key.clone(),
                secret.clone(),
                None,
                None,
                "jobwire-static",
            ));
        }
        let sdk = loader.load().await;
        SqsTransport {
            client: Client::new(&sdk),
            config,
            queue_urls: Mutex::new(HashMap::new()),
        }
    }

    /// The SQS queue name for a destination.
    fn queue_name(&self, topic: &str) -> Result<String, PublishError> {
        let base = topic.strip_suffix(".fifo").unwrap_or(topic);
        let name = if self.config.fifo {
            format!("{base}.fifo")
        } else {
            topic.to_owned()
        };
        let valid_chars = base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if base.is_empty()
            || name.len() > 80
            || !valid_chars
            || (!self.config.fifo && base != topic)
        {
            return Err(PublishError::Rejected(format!(
                "{topic:?} is not a valid SQS queue name (1-80 letters, digits, '-', '_'{})",
                if self.config.fifo {
                    ", '.fifo' suffix"
                } else {
                    ""
                }
            )));
        }
        Ok(name)
    }

    /// The queue URL, creating the queue on first use.
    async fn queue_url(&self, topic: &str) -> Result<String, PublishError> {
        let name = self.queue_name(topic)?;
        if let Some(url) = self.queue_urls.lock().await.get(&name) {
            return Ok(url.clone());
        }
        let url = create_queue(&self.client, &name, self.config.fifo).await?;
        self.queue_urls.lock().await.insert(name, url.clone());
        Ok(url)
    }

    fn attributes(
        envelope: &Envelope,
    ) -> Result<HashMap<String, MessageAttributeValue>, PublishError> {
        let mut attributes = HashMap::new();
        let key = envelope.key.iter().map(|key| (KEY_ATTRIBUTE, key.as_str()));
        let headers = envelope
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()));
        for (name, value) in headers.chain(key) {
            if value.is_empty() {
                continue; // SQS refuses empty attribute values
            }
            let attribute = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map_err(|err| PublishError::Rejected(err.to_string()))?;
            attributes.insert(name.to_owned(), attribute);
        }
        if attributes.len() > SQS_MAX_ATTRIBUTES {
            return Err(PublishError::Rejected(format!(
                "{} headers; SQS carries at most {SQS_MAX_ATTRIBUTES} message attributes",
                attributes.len()
            )));
        }
        Ok(attributes)
    }

    /// Size as SQS counts it: body plus attribute names, types and values.
    fn sqs_size(envelope: &Envelope, attributes: &HashMap<String, MessageAttributeValue>) -> usize {
        envelope.payload.len()
            + attributes
                .iter()
                .map(|(name, value)| {
                    name.len() + "String".len() + value.string_value().map_or(0, str::len)
                })
                .sum::<usize>()
    }

    fn entry(
        &self,
        index: usize,
        envelope: &Envelope,
    ) -> Result<(SendMessageBatchRequestEntry, usize), PublishError> {
        let body = std::str::from_utf8(&envelope.payload).map_err(|_| {
            PublishError::Rejected("SQS message bodies must be text (UTF-8)".into())
        })?;
        let attributes = Self::attributes(envelope)?;
        let size = Self::sqs_size(envelope, &attributes);
        if size > SQS_MAX_BYTES {
            return Err(PublishError::Rejected(format!(
                "message of {size} bytes exceeds SQS's limit of {SQS_MAX_BYTES} bytes"
            )));
        }
        let mut entry = SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(body)
            .set_message_attributes(Some(attributes));
        if self.config.fifo {
            entry = entry
                .message_group_id(envelope.key.as_deref().unwrap_or("default"))
                .message_deduplication_id(envelope.outbox_id.to_string());
        }
        let entry = entry
            .build()
            .map_err(|err| PublishError::Rejected(err.to_string()))?;
        Ok((entry, size))
    }

    /// One SendMessageBatch call; a result for every entry of the chunk,
    /// by its index in the publish batch.
    async fn send_chunk(
        &self,
        url: &str,
        chunk: Vec<(usize, SendMessageBatchRequestEntry)>,
    ) -> Vec<(usize, Result<(), PublishError>)> {
        let mut results: HashMap<usize, Result<(), PublishError>> = HashMap::new();
        let indices: Vec<usize> = chunk.iter().map(|(index, _)| *index).collect();
        let entries: Vec<SendMessageBatchRequestEntry> =
            chunk.into_iter().map(|(_, entry)| entry).collect();
        match self
            .client
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(output) => {
                for ok in output.successful() {
                    if let Ok(index) = ok.id().parse::<usize>() {
                        results.insert(index, Ok(()));
                    }
                }
                for failed in output.failed() {
                    if let Ok(index) = failed.id().parse::<usize>() {
                        let text = format!(
                            "{}: {}",
                            failed.code(),
                            failed.message().unwrap_or_default()
                        );
                        results.insert(
                            index,
                            Err(if failed.sender_fault() {
                                PublishError::Rejected(text)
                            } else {
                                PublishError::Unavailable(text)
                            }),
                        );
                    }
                }
                for index in &indices {
                    results.entry(*index).or_insert_with(|| {
                        Err(PublishError::Unavailable(
                            "SQS did not answer for this entry".into(),
                        ))
                    });
                }
            }
            Err(err) => {
                let text = error_text(&err);
                if queue_missing(&err) {
                    // Purged or deleted under us: look it up afresh next time.
                    self.queue_urls.lock().await.retain(|_, known| known != url);
                }
                let rejected = err.code().is_some_and(|code| {
                    code.contains("BatchRequestTooLong") || code.contains("InvalidParameterValue")
                });
                for index in &indices {
                    results.insert(
                        *index,
                        Err(if rejected {
                            PublishError::Rejected(text.clone())
                        } else {
                            PublishError::Unavailable(text.clone())
                        }),
                    );
                }
            }
        }
        // Only the chunk's own entries (an id SQS made up is ignored).
        indices
            .into_iter()
            .filter_map(|index| results.remove(&index).map(|result| (index, result)))
            .collect()
    }
}

#[async_trait]
impl Transport for SqsTransport {
    fn name(&self) -> &'static str {
        "sqs"
    }

    fn address(&self) -> String {
        match &self.config.endpoint {
            Some(endpoint) => format!("{endpoint} (region {})", self.config.region),
            None => format!("AWS region {}", self.config.region),
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            nack_requeues: true,
            per_key_order: self.config.fifo,
            max_message_bytes: SQS_MAX_BYTES,
        }
    }

    async fn check(&self) -> Result<(), TransportError> {
        // The cheapest signed call: it fails on a wrong endpoint, region or
        // credentials alike.
        self.client
            .list_queues()
            .max_results(1)
            .send()
            .await
            .map(|_| ())
            .map_err(unavailable)
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Result<(), PublishError>> {
        let mut results: Vec<Option<Result<(), PublishError>>> = vec![None; batch.len()];
        // Per destination, in batch order: chunks of at most 10 entries and
        // 256 KiB. FIFO queues get them one after another, so per-key order
        // holds; standard queues promise no order, and get several at once.
        let mut chunks: Vec<(String, Vec<(usize, SendMessageBatchRequestEntry)>)> = Vec::new();
        let mut topics: Vec<&str> = Vec::new();
        for envelope in batch {
            if !topics.contains(&envelope.topic.as_str()) {
                topics.push(&envelope.topic);
            }
        }
        for topic in topics {
            let url = match self.queue_url(topic).await {
                Ok(url) => url,
                Err(err) => {
                    for (index, envelope) in batch.iter().enumerate() {
                        if envelope.topic == topic {
                            results[index] = Some(Err(err.clone()));
                        }
                    }
                    continue;
                }
            };
            let mut chunk = Vec::new();
            let mut chunk_bytes = 0;
            for (index, envelope) in batch.iter().enumerate() {
                if envelope.topic != topic {
                    continue;
                }
                let (entry, size) = match self.entry(index, envelope) {
                    Ok(entry) => entry,
                    Err(err) => {
                        results[index] = Some(Err(err));
                        continue;
                    }
                };
                if chunk.len() == SQS_BATCH || chunk_bytes + size > SQS_MAX_BYTES {
                    chunks.push((url.clone(), std::mem::take(&mut chunk)));
                    chunk_bytes = 0;
                }
                chunk.push((index, entry));
                chunk_bytes += size;
            }
            if !chunk.is_empty() {
                chunks.push((url, chunk));
            }
        }
        let in_flight = if self.config.fifo {
            1
        } else {
            CHUNKS_IN_FLIGHT
        };
        let mut sent = futures::stream::iter(chunks)
            .map(|(url, chunk)| async move { self.send_chunk(&url, chunk).await })
            .buffer_unordered(in_flight);
        while let Some(chunk_results) = sent.next().await {
            for (index, result) in chunk_results {
                results[index] = Some(result);
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
        let url = self.queue_url(topic).await?;
        Ok(Box::new(SqsSubscriber {
            client: self.client.clone(),
            topic: topic.to_owned(),
            queue_name: self.queue_name(topic)?,
            fifo: self.config.fifo,
            url,
            visibility_timeout: options.visibility_timeout,
            outstanding: HashSet::new(),
        }))
    }

    async fn close(&self) -> Result<(), TransportError> {
        Ok(())
    }

    async fn purge(&self, topic: &str) -> Result<Option<u64>, TransportError> {
        let url = self.queue_url(topic).await?;
        self.client
            .purge_queue()
            .queue_url(url)
            .send()
            .await
            .map_err(unavailable)?;
        // SQS does not say how many it dropped.
        Ok(None)
    }

    async fn delete_topic(&self, topic: &str) -> Result<(), TransportError> {
        let name = self.queue_name(topic)?;
        // Looked up afresh rather than from `queue_urls`: `queue_url` would
        // create the queue just to delete it, and a cached URL may belong
        // to a queue someone else already deleted.
        let lookup = self.client.get_queue_url().queue_name(&name).send().await;
        let url = match lookup {
            Ok(output) => output.queue_url().map(str::to_owned),
            Err(err) if queue_missing(&err) => None,
            Err(err) => return Err(unavailable(err)),
        };
        if let Some(url) = url {
            match self.client.delete_queue().queue_url(&url).send().await {
                Ok(_) => {}
                Err(err) if queue_missing(&err) => {}
                Err(err) => return Err(unavailable(err)),
            }
        }
        // Publishing or subscribing to `topic` again creates a new queue.
        // AWS itself refuses that for 60 seconds after a delete
        // (QueueDeletedRecently); the local emulators do not by default.
        self.queue_urls.lock().await.remove(&name);
        Ok(())
    }
}

/// An SDK error and its causes, each as its own message, `: ` between:
/// `dispatch failure: io error: … Connection refused (os error 111)`.
/// The SDK's `DisplayErrorContext` appends the whole chain's debug form
/// (`DispatchFailure(DispatchFailure { source: ConnectorError { …`),
/// which reached operators' logs and the worker's refusal.
fn error_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cause = Some(err);
    while let Some(current) = cause {
        let text = current.to_string();
        // A wrapper often repeats its source's message: say it once.
        if !text.is_empty() && parts.last().is_none_or(|last| !last.contains(&text)) {
            parts.push(text);
        }
        cause = current.source();
    }
    parts.join(": ")
}

fn unavailable<E: std::error::Error + 'static>(err: E) -> TransportError {
    TransportError::Unavailable(error_text(&err))
}

/// Create queue `name` (or find it, if it exists with the same
/// attributes) and return its URL.
async fn create_queue(client: &Client, name: &str, fifo: bool) -> Result<String, PublishError> {
    let mut request = client.create_queue().queue_name(name);
    if fifo {
        request = request.attributes(QueueAttributeName::FifoQueue, "true");
    }
    let output = request.send().await.map_err(|err| {
        let text = error_text(&err);
        match err.code() {
            Some(code)
                if code.contains("InvalidParameter") || code.contains("InvalidAttribute") =>
            {
                PublishError::Rejected(text)
            }
            _ => PublishError::Unavailable(text),
        }
    })?;
    output
        .queue_url()
        .map(str::to_owned)
        .ok_or_else(|| PublishError::Unavailable("CreateQueue returned no URL".into()))
}

/// Whether SQS says the queue is not there: the code is the query
/// protocol's under AWS's JSON compatibility header, the plain one from
/// emulators that do not send it.
fn queue_missing(err: &impl ProvideErrorMetadata) -> bool {
    matches!(
        err.code(),
        Some("AWS.SimpleQueueService.NonExistentQueue" | "QueueDoesNotExist")
    )
}

/// The `WaitTimeSeconds` of a receive that may wait `wait`. SQS long-polls
/// in whole seconds, so a wait under a second is rounded *up*: rounded down
/// it would be 0, a short poll that returns at once when the queue is
/// empty, and the consumer would call ReceiveMessage in a tight loop (one
/// billed request each on SQS; on an emulator, a core spent answering
/// them). A long poll still returns as soon as a message arrives, so
/// rounding up delays only the empty answer. A zero wait stays a short poll.
fn long_poll_seconds(wait: Duration) -> i32 {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    seconds.min(SQS_MAX_WAIT_SECONDS) as i32
}

struct SqsSubscriber {
    client: Client,
    topic: String,
    /// The queue's name and kind, to create it again if it goes away.
    queue_name: String,
    fifo: bool,
    url: String,
    visibility_timeout: Duration,
    /// Receipt handles received and not yet acked or nacked; `close` makes
    /// them visible again at once.
    outstanding: HashSet<String>,
}

impl SqsSubscriber {
    fn handles(receipts: &[Receipt]) -> Vec<String> {
        receipts
            .iter()
            .filter_map(|receipt| match &receipt.0 {
                ReceiptInner::Sqs { receipt_handle } => Some(receipt_handle.clone()),
                #[allow(unreachable_patterns)]
                _ => None,
            })
            .collect()
    }

    async fn make_visible(&mut self, handles: Vec<String>) -> Result<(), TransportError> {
        let mut refused = Vec::new();
        for chunk in handles.chunks(SQS_BATCH) {
            let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .map(|(i, handle)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(handle)
                        .visibility_timeout(0)
                        .build()
                        .expect("id and handle are set")
                })
                .collect();
            let output = self
                .client
                .change_message_visibility_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(unavailable)?;
            refused.extend(
                output
                    .failed()
                    .iter()
                    .map(|failed| entry_failure(failed.code(), failed.message())),
            );
            for handle in chunk {
                self.outstanding.remove(handle);
            }
        }
        refusal("give back", handles.len(), refused)
    }

    async fn delete(&mut self, handles: Vec<String>) -> Result<(), TransportError> {
        let mut refused = Vec::new();
        for chunk in handles.chunks(SQS_BATCH) {
            let entries: Vec<DeleteMessageBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .map(|(i, handle)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(handle)
                        .build()
                        .expect("id and handle are set")
                })
                .collect();
            let output = self
                .client
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(unavailable)?;
            refused.extend(
                output
                    .failed()
                    .iter()
                    .map(|failed| entry_failure(failed.code(), failed.message())),
            );
            for handle in chunk {
                self.outstanding.remove(handle);
            }
        }
        refusal("acknowledge", handles.len(), refused)
    }
}

/// One entry of a batch call that SQS refused, for a person.
fn entry_failure(code: &str, message: Option<&str>) -> String {
    format!("{code}: {}", message.unwrap_or_default())
}

/// The answer of a batch of `total` deletes or visibility changes of which
/// SQS refused `refused` one by one (an expired receipt handle, a message
/// gone): the batch call itself succeeded, so these were silent before.
/// Every other entry took effect; a refused delete's wake-up comes again, a
/// refused give-back waits out its visibility timeout.
fn refusal(what: &str, total: usize, refused: Vec<String>) -> Result<(), TransportError> {
    let Some(first) = refused.first() else {
        return Ok(());
    };
    Err(TransportError::Refused(format!(
        "SQS refused to {what} {} of {total} message(s), first: {first}",
        refused.len()
    )))
}

#[async_trait]
impl Subscriber for SqsSubscriber {
    async fn receive(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, TransportError> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(max.clamp(1, SQS_BATCH) as i32)
            .wait_time_seconds(long_poll_seconds(wait))
            .visibility_timeout(self.visibility_timeout.as_secs().max(1) as i32)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await;
        let output = match output {
            Ok(output) => output,
            Err(err) if queue_missing(&err) => {
                // Deleted under us, or an emulator restarted empty: the
                // relay creates it again only when it next publishes, and
                // an idle queue may not see a publish for a long time.
                // Created here, the next receive finds it.
                let url = create_queue(&self.client, &self.queue_name, self.fifo).await?;
                self.url = url;
                self.outstanding.clear();
                return Err(TransportError::Unavailable(format!(
                    "{}; created the queue again",
                    error_text(&err)
                )));
            }
            Err(err) => return Err(unavailable(err)),
        };
        let mut deliveries = Vec::new();
        for message in output.messages() {
            let Some(handle) = message.receipt_handle() else {
                continue;
            };
            let mut headers = Headers::new();
            let mut key = None;
            for (name, value) in message.message_attributes().into_iter().flatten() {
                let text = value.string_value().unwrap_or_default().to_owned();
                if name == KEY_ATTRIBUTE {
                    key = Some(text);
                } else {
                    headers.insert(name.clone(), text);
                }
            }
            let system = message.attributes();
            if key.is_none() {
                key = system
                    .and_then(|attrs| attrs.get(&MessageSystemAttributeName::MessageGroupId))
                    .cloned();
            }
            let receive_count: u32 = system
                .and_then(|attrs| attrs.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|count| count.parse().ok())
                .unwrap_or(1);
            self.outstanding.insert(handle.to_owned());
            deliveries.push(Delivery {
                topic: self.topic.clone(),
                key,
                payload: message.body().unwrap_or_default().as_bytes().to_vec(),
                headers,
                broker_message_id: message.message_id().unwrap_or_default().to_owned(),
                redelivered: receive_count > 1,
                receipt: Receipt(ReceiptInner::Sqs {
                    receipt_handle: handle.to_owned(),
                }),
            });
        }
        Ok(deliveries)
    }

    async fn ack(&mut self, receipts: &[Receipt]) -> Result<(), TransportError> {
        self.delete(Self::handles(receipts)).await
    }

    async fn nack(&mut self, receipts: &[Receipt], requeue: bool) -> Result<(), TransportError> {
        let handles = Self::handles(receipts);
        if requeue {
            self.make_visible(handles).await
        } else {
            self.delete(handles).await
        }
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        let handles: Vec<String> = self.outstanding.iter().cloned().collect();
        self.make_visible(handles).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing listens on port 1: the SDK fails to dispatch. What the
    /// operator reads is the chain's messages, not its debug form.
    #[tokio::test]
    async fn an_unreachable_endpoint_reads_as_messages() {
        let transport = SqsTransport::new(SqsConfig::local("http://127.0.0.1:1")).await;
        let err = transport.check().await.unwrap_err().to_string();
        assert!(err.contains("Connection refused"), "{err}");
        assert!(!err.contains("DispatchFailure {"), "{err}");
        assert!(!err.contains("source:"), "{err}");
    }

    #[test]
    fn a_wait_under_a_second_long_polls_for_one_second() {
        assert_eq!(long_poll_seconds(Duration::from_millis(200)), 1);
        assert_eq!(long_poll_seconds(Duration::from_millis(500)), 1);
        assert_eq!(long_poll_seconds(Duration::from_millis(1_500)), 2);
    }

    #[test]
    fn whole_seconds_are_kept_up_to_the_sqs_limit() {
        assert_eq!(long_poll_seconds(Duration::ZERO), 0);
        assert_eq!(long_poll_seconds(Duration::from_secs(1)), 1);
        assert_eq!(long_poll_seconds(Duration::from_secs(20)), 20);
        assert_eq!(long_poll_seconds(Duration::from_secs(300)), 20);
    }
}
