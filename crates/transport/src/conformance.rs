//! One conformance suite for every [`Transport`]: plain async scenario
//! functions over a [`ConformanceTarget`], each on a topic of its own.
//! Scenarios that need a capability the target does not declare return
//! early (and say so on stderr). Every backend's test file runs them all
//! against its real broker with [`conformance_tests!`](crate::conformance_tests).
//! A scenario that passes deletes the destinations it made, so runs do not
//! fill a developer's broker; one that fails leaves them for inspection.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use crate::{
    Delivery, Envelope, Headers, PublishError, Receipt, SubscribeOptions, Subscriber, Transport,
    TransportError, header,
};

/// A transport implementation under test.
#[async_trait]
pub trait ConformanceTarget: Send + Sync {
    /// A transport connected to the real broker.
    async fn transport(&self) -> Arc<dyn Transport>;
    /// A transport configured for a broker that is not there (a dead port).
    async fn unreachable(&self) -> Arc<dyn Transport>;
    /// A fresh destination name for one scenario.
    fn topic(&self, scenario: &str) -> String;
    /// Options for the scenarios' subscribers.
    fn subscribe_options(&self) -> SubscribeOptions {
        SubscribeOptions {
            group: format!("conformance-{}", uuid::Uuid::new_v4().simple()),
            prefetch: 100,
            visibility_timeout: Duration::from_secs(30),
        }
    }
}

/// How long a scenario waits for deliveries it expects.
const EXPECT: Duration = Duration::from_secs(30);
/// How long a scenario listens to make sure nothing more arrives.
const QUIET: Duration = Duration::from_secs(2);

static NEXT_OUTBOX_ID: AtomicI64 = AtomicI64::new(0);

/// Unique outbox ids across scenarios and runs (SQS FIFO deduplicates on them).
fn outbox_id() -> i64 {
    let base = NEXT_OUTBOX_ID.load(Ordering::Relaxed);
    if base == 0 {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_micros() as i64);
        let _ = NEXT_OUTBOX_ID.compare_exchange(0, seed, Ordering::SeqCst, Ordering::SeqCst);
    }
    NEXT_OUTBOX_ID.fetch_add(1, Ordering::SeqCst) + 1
}

/// An envelope as the relay builds it.
pub fn envelope(topic: &str, key: Option<&str>, payload: &[u8]) -> Envelope {
    let id = outbox_id();
    let mut headers = Headers::new();
    headers.insert(header::OUTBOX_ID.into(), id.to_string());
    headers.insert(header::CONTENT_TYPE.into(), "application/json".into());
    headers.insert(
        header::TRACEPARENT.into(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    );
    Envelope {
        outbox_id: id,
        topic: topic.to_owned(),
        key: key.map(str::to_owned),
        payload: payload.to_vec(),
        headers,
    }
}

async fn publish_ok(transport: &dyn Transport, batch: &[Envelope]) {
    let results = transport.publish(batch).await;
    assert_eq!(results.len(), batch.len(), "one result per message");
    for (envelope, result) in batch.iter().zip(results) {
        assert!(
            result.is_ok(),
            "publishing outbox id {} failed: {result:?}",
            envelope.outbox_id
        );
    }
}

/// Receive until `count` deliveries arrived or `within` passed.
pub async fn receive_count(
    subscriber: &mut dyn Subscriber,
    count: usize,
    within: Duration,
) -> Vec<Delivery> {
    let deadline = tokio::time::Instant::now() + within;
    let mut received = Vec::new();
    while received.len() < count {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let batch = subscriber
            .receive(count - received.len(), left.min(Duration::from_secs(5)))
            .await
            .expect("receive");
        received.extend(batch);
    }
    received
}

/// The receipts of `deliveries`, to acknowledge or give them back.
pub fn receipts(deliveries: &[Delivery]) -> Vec<Receipt> {
    deliveries.iter().map(|d| d.receipt.clone()).collect()
}

/// The payloads of `deliveries` as text, in order: the scenarios name
/// their messages by payload.
pub fn payloads(deliveries: &[Delivery]) -> Vec<String> {
    deliveries
        .iter()
        .map(|d| String::from_utf8_lossy(&d.payload).into_owned())
        .collect()
}

async fn ack_all(subscriber: &mut dyn Subscriber, deliveries: &[Delivery]) {
    subscriber.ack(&receipts(deliveries)).await.expect("ack");
}

/// Delete a scenario's destination once its assertions passed. A failure
/// is only reported on stderr: the scenario's own result is what counts,
/// and debris is not a conformance failure. Bounded, so a broker that
/// stops answering cannot hang a scenario that passed.
async fn clean_up(transport: &dyn Transport, topic: &str) {
    match tokio::time::timeout(EXPECT, transport.delete_topic(topic)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => eprintln!("{}: could not delete {topic}: {err}", transport.name()),
        Err(_) => eprintln!(
            "{}: deleting {topic} took longer than {EXPECT:?}; left as it is",
            transport.name()
        ),
    }
}

async fn assert_quiet(subscriber: &mut dyn Subscriber) {
    let extra = subscriber.receive(10, QUIET).await.expect("receive");
    assert!(
        extra.is_empty(),
        "unexpected deliveries: {:?}",
        extra.iter().map(Delivery::outbox_id).collect::<Vec<_>>()
    );
}

/// One message there and back: payload, key, headers (trace context, outbox
/// id) arrive intact; an acknowledged message does not come back.
pub async fn round_trip(target: &dyn ConformanceTarget) {
    let transport = target.transport().await;
    let topic = target.topic("round-trip");
    let mut subscriber = transport
        .subscribe(&topic, &target.subscribe_options())
        .await
        .expect("subscribe");
    let sent = envelope(&topic, Some("key-1"), br#"{"job_id":"0190b6a8"}"#);
    publish_ok(transport.as_ref(), std::slice::from_ref(&sent)).await;

    let received = receive_count(subscriber.as_mut(), 1, EXPECT).await;
    assert_eq!(received.len(), 1, "the message did not arrive");
    let delivery = &received[0];
    assert_eq!(delivery.payload, sent.payload);
    assert_eq!(delivery.topic, topic);
    assert_eq!(delivery.outbox_id(), Some(sent.outbox_id));
    for (name, value) in &sent.headers {
        assert_eq!(delivery.headers.get(name), Some(value), "header {name}");
    }
    if transport.capabilities().per_key_order {
        assert_eq!(delivery.key.as_deref(), Some("key-1"));
    }
    assert!(!delivery.broker_message_id.is_empty());
    assert!(!delivery.redelivered);
    ack_all(subscriber.as_mut(), &received).await;
    assert_quiet(subscriber.as_mut()).await;
    subscriber.close().await.expect("close");
    clean_up(transport.as_ref(), &topic).await;
}

/// A batch of 50 is published in one call and every message arrives once.
pub async fn batch_publish(target: &dyn ConformanceTarget) {
    let transport = target.transport().await;
    let topic = target.topic("batch");
    let mut subscriber = transport
        .subscribe(&topic, &target.subscribe_options())
        .await
        .expect("subscribe");
    let batch: Vec<Envelope> = (0..50)
        .map(|i| {
            envelope(
                &topic,
                Some(&format!("k{}", i % 5)),
                format!("{{\"i\":{i}}}").as_bytes(),
            )
        })
        .collect();
    publish_ok(transport.as_ref(), &batch).await;
    // Acknowledge as deliveries arrive, as a consumer does (SQS FIFO holds a
    // group back while one of its messages is in flight).
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + EXPECT;
    while received.len() < batch.len() && tokio::time::Instant::now() < deadline {
        let got = subscriber
            .receive(batch.len() - received.len(), Duration::from_secs(2))
            .await
            .expect("receive");
        ack_all(subscriber.as_mut(), &got).await;
        received.extend(got);
    }
    let ids: HashSet<i64> = received.iter().filter_map(Delivery::outbox_id).collect();
    let sent: HashSet<i64> = batch.iter().map(|e| e.outbox_id).collect();
    assert_eq!(ids, sent, "every message arrives");
    assert_eq!(received.len(), batch.len(), "none twice");
    assert_quiet(subscriber.as_mut()).await;
    subscriber.close().await.expect("close");
    clean_up(transport.as_ref(), &topic).await;
}

/// `nack(requeue)` brings the message back.
pub async fn nack_requeues(target: &dyn ConformanceTarget) {
    let transport = target.transport().await;
    if !transport.capabilities().nack_requeues {
        eprintln!("{}: skipped (no nack requeue)", transport.name());
        return;
    }
    let topic = target.topic("nack");
    let mut subscriber = transport
        .subscribe(&topic, &target.subscribe_options())
        .await
        .expect("subscribe");
    let sent = envelope(&topic, None, b"{\"retry\":true}");
    publish_ok(transport.as_ref(), std::slice::from_ref(&sent)).await;
    let first = receive_count(subscriber.as_mut(), 1, EXPECT).await;
    assert_eq!(first.len(), 1);
    subscriber
        .nack(&[first[0].receipt.clone()], true)
        .await
        .expect("nack");
    let again = receive_count(subscriber.as_mut(), 1, EXPECT).await;
    assert_eq!(again.len(), 1, "a nacked message comes back");
    assert_eq!(again[0].outbox_id(), Some(sent.outbox_id));
    assert!(again[0].redelivered, "marked as a redelivery");
    ack_all(subscriber.as_mut(), &again).await;
    assert_quiet(subscriber.as_mut()).await;
    subscriber.close().await.expect("close");
    clean_up(transport.as_ref(), &topic).await;
}

/// A delivery that was never acknowledged comes back to the next subscriber
/// after the first one closes (a consumer restart).
pub async fn unacked_redelivered_after_restart(target: &dyn ConformanceTarget) {
    let transport = target.transport().await;
    let topic = target.topic("restart");
    let options = target.subscribe_options();
    let mut first = transport
        .subscribe(&topic, &options)
        .await
        .expect("subscribe");
    let sent = envelope(&topic, Some("k"), b"{\"n\":1}");
    publish_ok(transport.as_ref(), std::slice::from_ref(&sent)).await;
    let got = receive_count(first.as_mut(), 1, EXPECT).await;
    assert_eq!(got.len(), 1);
    first.close().await.expect("close");
    drop(first);

    let mut second = transport
        .subscribe(&topic, &options)
        .await
        .expect("subscribe");
    let again = receive_count(second.as_mut(), 1, EXPECT).await;
    assert_eq!(again.len(), 1, "the unacknowledged message was lost");
    assert_eq!(again[0].outbox_id(), Some(sent.outbox_id));
    ack_all(second.as_mut(), &again).await;
    second.close().await.expect("close");
    clean_up(transport.as_ref(), &topic).await;
}

/// Messages of one key arrive in publish order (where declared).
pub async fn per_key_order(target: &dyn ConformanceTarget) {
    let transport = target.transport().await;
    if !transport.capabilities().per_key_order {
        eprintln!("{}: skipped (no per-key order)", transport.name());
        return;
    }
    let topic = target.topic("order");
    let mut subscriber = transport
        .subscribe(&topic, &target.subscribe_options())
        .await
        .expect("subscribe");
    let keys = ["alpha", "beta", "gamma"];
    let batch: Vec<Envelope> = (0..30)
        .map(|i| {
            envelope(
                &topic,
                Some(keys[i % 3]),
                format!("{{\"i\":{i}}}").as_bytes(),
            )
        })
        .collect();
    publish_ok(transport.as_ref(), &batch).await;
    let mut by_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + EXPECT;
    let mut count = 0;
    while count < batch.len() && tokio::time::Instant::now() < deadline {
        let got = subscriber
            .receive(10, Duration::from_secs(2))
            .await
            .expect("receive");
        for delivery in &got {
            by_key
                .entry(delivery.key.clone().expect("keyed message"))
                .or_default()
                .push(delivery.outbox_id().expect("outbox id"));
        }
        count += got.len();
        // Acknowledge as we go: SQS FIFO holds a group while a message of it
        // is in flight.
        ack_all(subscriber.as_mut(), &got).await;
    }
    assert_eq!(count, batch.len(), "every message arrives once");
    for (key, ids) in by_key {
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(ids, sorted, "key {key} arrived out of order");
    }
    subscriber.close().await.expect("close");
    clean_up(transport.as_ref(), &topic).await;
}

/// A message over the size limit is rejected on its own; the rest of the
/// batch goes through.
pub async fn oversized_message_is_rejected_alone(target: &dyn ConformanceTarget) {
    let transport = target.transport().await;
    let topic = target.topic("oversized");
    let mut subscriber = transport
        .subscribe(&topic, &target.subscribe_options())
        .await
        .expect("subscribe");
    let limit = transport.capabilities().max_message_bytes;
    let big_payload = format!("{{\"blob\":\"{}\"}}", "x".repeat(limit));
    let batch = vec![
        envelope(&topic, Some("k"), b"{\"n\":1}"),
        envelope(&topic, Some("k"), big_payload.as_bytes()),
        envelope(&topic, Some("k"), b"{\"n\":3}"),
    ];
    let results = transport.publish(&batch).await;
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(
        matches!(results[1], Err(PublishError::Rejected(_))),
        "oversized: {:?}",
        results[1]
    );
    assert!(results[2].is_ok(), "{:?}", results[2]);
    let received = receive_count(subscriber.as_mut(), 2, EXPECT).await;
    let ids: HashSet<i64> = received.iter().filter_map(Delivery::outbox_id).collect();
    assert_eq!(ids, HashSet::from([batch[0].outbox_id, batch[2].outbox_id]));
    ack_all(subscriber.as_mut(), &received).await;
    assert_quiet(subscriber.as_mut()).await;
    subscriber.close().await.expect("close");
    clean_up(transport.as_ref(), &topic).await;
}

/// The transport carries bytes, not meaning: a payload that is not valid
/// JSON (garbage a consumer must survive) arrives unchanged.
pub async fn malformed_payload_round_trips(target: &dyn ConformanceTarget) {
    let transport = target.transport().await;
    let topic = target.topic("malformed");
    let mut subscriber = transport
        .subscribe(&topic, &target.subscribe_options())
        .await
        .expect("subscribe");
    let garbage = envelope(&topic, None, b"{\"job_id\": not json ]]");
    publish_ok(transport.as_ref(), std::slice::from_ref(&garbage)).await;
    let received = receive_count(subscriber.as_mut(), 1, EXPECT).await;
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].payload, garbage.payload);
    ack_all(subscriber.as_mut(), &received).await;
    subscriber.close().await.expect("close");
    clean_up(transport.as_ref(), &topic).await;
}

/// A destination no broker accepts is rejected, not dropped. (Nothing to
/// clean up: the name cannot exist.)
pub async fn invalid_destination_is_rejected(target: &dyn ConformanceTarget) {
    let transport = target.transport().await;
    let bad = format!("bad destination/{}", "x".repeat(300));
    let results = transport.publish(&[envelope(&bad, None, b"{}")]).await;
    assert!(
        matches!(results[0], Err(PublishError::Rejected(_))),
        "{:?}",
        results[0]
    );
}

/// Publishing while the broker is unreachable is an error for every
/// message, within a bounded time: nothing is silently dropped. (Nothing to
/// clean up: the real broker never saw the topic.)
pub async fn unreachable_broker_is_an_error(target: &dyn ConformanceTarget) {
    let transport = target.unreachable().await;
    let topic = target.topic("unreachable");
    let batch = vec![
        envelope(&topic, Some("k"), b"{}"),
        envelope(&topic, Some("k"), b"{}"),
    ];
    let results = tokio::time::timeout(Duration::from_secs(60), transport.publish(&batch))
        .await
        .expect("publish to an unreachable broker must fail in bounded time");
    assert_eq!(results.len(), 2);
    for result in results {
        assert!(
            matches!(result, Err(PublishError::Unavailable(_))),
            "{result:?}"
        );
    }
}

/// `check` answers for a broker that is there and refuses one that is not,
/// within a bounded time and with nothing published.
pub async fn check_tells_a_reachable_broker_from_an_unreachable_one(
    target: &dyn ConformanceTarget,
) {
    target
        .transport()
        .await
        .check()
        .await
        .expect("the broker under test is reachable");
    let down = tokio::time::timeout(Duration::from_secs(60), target.unreachable().await.check())
        .await
        .expect("checking an unreachable broker must fail in bounded time");
    assert!(
        matches!(down, Err(TransportError::Unavailable(_))),
        "{down:?}"
    );
}

/// `delete_topic` removes the destination with what is queued on it, and
/// deleting it again is no error. A subscriber on the same name afterwards
/// starts from nothing: it does not get the deleted message, and it does
/// get one published after the delete through the same transport (which
/// must not trust a destination it created before the delete).
pub async fn delete_topic_removes_the_destination(target: &dyn ConformanceTarget) {
    let transport = target.transport().await;
    let topic = target.topic("delete");
    let deleted = envelope(&topic, Some("k"), b"{\"n\":1}");
    publish_ok(transport.as_ref(), std::slice::from_ref(&deleted)).await;
    transport
        .delete_topic(&topic)
        .await
        .expect("delete the topic");
    transport
        .delete_topic(&topic)
        .await
        .expect("deleting a topic that is gone is no error");

    let mut subscriber = transport
        .subscribe(&topic, &target.subscribe_options())
        .await
        .expect("subscribe to the deleted topic's name");
    assert_quiet(subscriber.as_mut()).await;
    let after = envelope(&topic, Some("k"), b"{\"n\":2}");
    publish_ok(transport.as_ref(), std::slice::from_ref(&after)).await;
    let received = receive_count(subscriber.as_mut(), 1, EXPECT).await;
    let ids: Vec<Option<i64>> = received.iter().map(Delivery::outbox_id).collect();
    assert_eq!(
        ids,
        vec![Some(after.outbox_id)],
        "only the message published after the delete arrives (deleted: {})",
        deleted.outbox_id
    );
    ack_all(subscriber.as_mut(), &received).await;
    assert_quiet(subscriber.as_mut()).await;
    subscriber.close().await.expect("close");
    clean_up(transport.as_ref(), &topic).await;
}

/// Define one `#[tokio::test]` per conformance scenario for `$target` (an
/// expression building a [`ConformanceTarget`]).
#[macro_export]
macro_rules! conformance_tests {
    ($target:expr) => {
        $crate::conformance_tests!(@each $target;
            round_trip, batch_publish, nack_requeues, unacked_redelivered_after_restart,
            per_key_order, oversized_message_is_rejected_alone, malformed_payload_round_trips,
            invalid_destination_is_rejected, unreachable_broker_is_an_error,
            check_tells_a_reachable_broker_from_an_unreachable_one,
            delete_topic_removes_the_destination);
    };
    (@each $target:expr; $($scenario:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let target = $target;
                $crate::conformance::$scenario(&target).await;
            }
        )*
    };
}
