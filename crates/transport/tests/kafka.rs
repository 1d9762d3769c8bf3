//! Kafka passes the conformance suite against a real Kafka-protocol broker
//! (`KAFKA_BOOTSTRAP`, default `127.0.0.1:9092`; `docker compose up kafka`
//! gives a real Apache Kafka there).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jobwire_transport::Transport;
use jobwire_transport::conformance::ConformanceTarget;
use jobwire_transport::kafka::{KafkaConfig, KafkaTransport};

struct KafkaTarget;

fn bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

#[async_trait]
impl ConformanceTarget for KafkaTarget {
    async fn transport(&self) -> Arc<dyn Transport> {
        let mut config = KafkaConfig::new(bootstrap());
        config.timeout = Duration::from_secs(15);
        Arc::new(KafkaTransport::new(config).expect("kafka transport"))
    }

    async fn unreachable(&self) -> Arc<dyn Transport> {
        let mut config = KafkaConfig::new("127.0.0.1:1");
        config.timeout = Duration::from_secs(5);
        Arc::new(KafkaTransport::new(config).expect("kafka transport"))
    }

    fn topic(&self, scenario: &str) -> String {
        format!("conformance.{scenario}.{}", uuid::Uuid::new_v4().simple())
    }
}

jobwire_transport::conformance_tests!(KafkaTarget);

/// A partition whose log starts over (the topic deleted and re-created, or a
/// broker that lost its log) while a group member holds progress on it: the
/// member must commit offsets of the new log, not the old, far-too-high one.
/// Otherwise the next member of the group starts past the end of the new
/// log and skips every wake-up below it (or, on Apache Kafka, is reset to
/// the beginning and gets everything again).
#[tokio::test]
async fn a_log_that_starts_over_does_not_skip_or_repeat_wake_ups() {
    use jobwire_transport::SubscribeOptions;
    use jobwire_transport::conformance::{envelope, payloads, receipts, receive_count};

    let transport = KafkaTarget.transport().await;
    let topic = KafkaTarget.topic("log_starts_over");
    let options = SubscribeOptions {
        group: format!("restart-{}", uuid::Uuid::new_v4().simple()),
        prefetch: 100,
        ..SubscribeOptions::default()
    };
    let publish = |label: String| {
        let transport = transport.clone();
        let topic = topic.clone();
        async move {
            // One key: one partition, so offsets are easy to reason about.
            let results = transport
                .publish(&[envelope(&topic, Some("one-key"), label.as_bytes())])
                .await;
            assert!(results.iter().all(Result::is_ok), "{results:?}");
        }
    };

    // 1. The first member reads and acknowledges 20 messages: offsets 0..20.
    let mut first = transport.subscribe(&topic, &options).await.unwrap();
    for n in 0..20 {
        publish(format!("old-{n}")).await;
    }
    let old = receive_count(first.as_mut(), 20, Duration::from_secs(60)).await;
    assert_eq!(old.len(), 20, "{:?}", payloads(&old));
    first.ack(&receipts(&old)).await.unwrap();

    // 2. The log starts over; the same member goes on reading it.
    transport.delete_topic(&topic).await.unwrap();
    for n in 0..3 {
        publish(format!("new-{n}")).await;
    }
    let new = receive_count(first.as_mut(), 3, Duration::from_secs(90)).await;
    assert_eq!(
        payloads(&new),
        vec!["new-0", "new-1", "new-2"],
        "the member must read the new log from its start"
    );
    first.ack(&receipts(&new)).await.unwrap();
    first.close().await.unwrap();

    // 3. The next member of the group starts where the first one left the
    //    new log: it gets exactly what came after, nothing skipped, nothing
    //    from before again.
    let mut second = transport.subscribe(&topic, &options).await.unwrap();
    publish("after-0".into()).await;
    publish("after-1".into()).await;
    let after = receive_count(second.as_mut(), 2, Duration::from_secs(60)).await;
    let extra = second.receive(10, Duration::from_secs(2)).await.unwrap();
    assert_eq!(payloads(&after), vec!["after-0", "after-1"]);
    assert!(extra.is_empty(), "delivered again: {:?}", payloads(&extra));
    second.close().await.unwrap();
    let _ = transport.delete_topic(&topic).await;
}

/// A wake-up given back (`nack` with requeue, as a worker does when its
/// claim fails) comes again from this member, and once it is acknowledged
/// the group's committed offset moves past it and past every wake-up
/// acknowledged after it. Left unacknowledged instead, it held the offset
/// below it until the member stopped, and the next member of the group got
/// every later wake-up a second time.
#[tokio::test]
async fn a_wake_up_given_back_comes_again_and_holds_up_no_later_one() {
    use jobwire_transport::SubscribeOptions;
    use jobwire_transport::conformance::{envelope, payloads, receipts, receive_count};

    let transport = KafkaTarget.transport().await;
    let topic = KafkaTarget.topic("given_back");
    let options = SubscribeOptions {
        group: format!("given-back-{}", uuid::Uuid::new_v4().simple()),
        prefetch: 100,
        ..SubscribeOptions::default()
    };
    let mut first = transport.subscribe(&topic, &options).await.unwrap();
    // One key: one partition, so the three share one committed offset.
    let sent: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|label| envelope(&topic, Some("one-key"), label.as_bytes()))
        .collect();
    let results = transport.publish(&sent).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let three = receive_count(first.as_mut(), 3, Duration::from_secs(60)).await;
    assert_eq!(payloads(&three), vec!["a", "b", "c"]);

    // Given back twice before it came again: still one delivery.
    first.nack(&receipts(&three[..1]), true).await.unwrap();
    first.nack(&receipts(&three[..1]), true).await.unwrap();
    first.ack(&receipts(&three[1..])).await.unwrap();
    let again = first.receive(10, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        payloads(&again),
        vec!["a"],
        "the wake-up given back comes again, once"
    );
    assert!(again[0].redelivered, "marked as a redelivery");
    first.ack(&receipts(&again)).await.unwrap();
    first.close().await.unwrap();

    let mut second = transport.subscribe(&topic, &options).await.unwrap();
    let results = transport
        .publish(&[envelope(&topic, Some("one-key"), b"d")])
        .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let next = receive_count(second.as_mut(), 1, Duration::from_secs(60)).await;
    let extra = second.receive(10, Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        payloads(&next),
        vec!["d"],
        "the next member starts past every acknowledged wake-up"
    );
    assert!(extra.is_empty(), "delivered again: {:?}", payloads(&extra));
    second.close().await.unwrap();
    let _ = transport.delete_topic(&topic).await;
}

/// A consumer group rebalances as a whole: when a member joins, every
/// member's partitions are taken away and handed out again once all of them
/// have joined again, and none of them receives meanwhile. A worker
/// subscribes to each of its queues' topics with the same options, so with
/// one group for all of them a worker starting to serve one queue paused
/// every other queue's wake-ups in the group (for as long as a member whose
/// queue was busy took to join again). Each topic now has a group of its
/// own. Here the first subscriber is not asked to receive while the second
/// one joins (as a worker's busy queue is not): in one shared group the
/// second one would get nothing until it was. And a delivery the first one
/// left unacknowledged would come a second time after a rebalance of its
/// group, read again from the last committed offset.
#[tokio::test]
async fn subscribing_to_another_topic_leaves_this_topics_group_alone() {
    use jobwire_transport::SubscribeOptions;
    use jobwire_transport::conformance::{envelope, payloads, receive_count};

    let transport = KafkaTarget.transport().await;
    let first_topic = KafkaTarget.topic("group_per_topic_first");
    let second_topic = KafkaTarget.topic("group_per_topic_second");
    let options = SubscribeOptions {
        group: format!("per-topic-{}", uuid::Uuid::new_v4().simple()),
        prefetch: 100,
        ..SubscribeOptions::default()
    };
    let publish = |topic: &str, label: &str| {
        let transport = transport.clone();
        let message = envelope(topic, Some("one-key"), label.as_bytes());
        async move {
            let results = transport.publish(&[message]).await;
            assert!(results.iter().all(Result::is_ok), "{results:?}");
        }
    };

    let mut first = transport.subscribe(&first_topic, &options).await.unwrap();
    publish(&first_topic, "first-0").await;
    let received = receive_count(first.as_mut(), 1, Duration::from_secs(60)).await;
    assert_eq!(payloads(&received), vec!["first-0"]);
    // Left unacknowledged on purpose (see above).

    // Another topic, the same options: its subscriber has its partitions
    // once it receives. In one shared group, that assignment would have
    // come from a rebalance that took the first topic's partition away.
    let mut second = transport.subscribe(&second_topic, &options).await.unwrap();
    publish(&second_topic, "second-0").await;
    let received = receive_count(second.as_mut(), 1, Duration::from_secs(60)).await;
    assert_eq!(payloads(&received), vec!["second-0"]);

    let again = first.receive(10, Duration::from_secs(5)).await.unwrap();
    assert!(
        again.is_empty(),
        "the first topic's group rebalanced and delivered again: {:?}",
        payloads(&again)
    );
    publish(&first_topic, "first-1").await;
    let next = receive_count(first.as_mut(), 1, Duration::from_secs(60)).await;
    assert_eq!(payloads(&next), vec!["first-1"]);

    first.close().await.unwrap();
    second.close().await.unwrap();
    let _ = transport.delete_topic(&first_topic).await;
    let _ = transport.delete_topic(&second_topic).await;
}

/// A fresh topic and consumer group (named after `scenario`), and a member
/// of it that received (and acknowledged) one message: it holds every
/// partition of the topic from then on.
async fn member_that_received_once(
    scenario: &str,
) -> (
    Arc<dyn Transport>,
    String,
    jobwire_transport::SubscribeOptions,
    Box<dyn jobwire_transport::Subscriber>,
) {
    use jobwire_transport::conformance::{envelope, payloads, receipts, receive_count};

    let transport = KafkaTarget.transport().await;
    let topic = KafkaTarget.topic(scenario);
    let options = jobwire_transport::SubscribeOptions {
        group: format!("{scenario}-{}", uuid::Uuid::new_v4().simple()),
        prefetch: 100,
        ..jobwire_transport::SubscribeOptions::default()
    };
    let mut member = transport.subscribe(&topic, &options).await.unwrap();
    let first = envelope(&topic, Some("key-first"), b"first");
    assert!(transport.publish(&[first]).await.iter().all(Result::is_ok));
    let received = receive_count(member.as_mut(), 1, Duration::from_secs(60)).await;
    assert_eq!(payloads(&received), vec!["first"]);
    member.ack(&receipts(&received)).await.unwrap();
    (transport, topic, options, member)
}

/// `count` messages `m0`, `m1`, … keyed `key-0`, `key-1`, …: keys spread
/// over every partition of the topic.
fn keyed_messages(topic: &str, count: usize) -> Vec<jobwire_transport::Envelope> {
    (0..count)
        .map(|i| {
            jobwire_transport::conformance::envelope(
                topic,
                Some(&format!("key-{i}")),
                format!("m{i}").as_bytes(),
            )
        })
        .collect()
}

/// A member whose caller has no free slot holds instead of receiving (as a
/// worker does while every slot of the queue is busy). A second member of
/// the same topic's group must get its share of the partitions meanwhile:
/// the hold takes part in the rebalance. A member that just stops polling
/// holds the rebalance up until librdkafka drops it (`max.poll.interval.ms`,
/// five minutes), and the second member receives nothing. Nothing is lost
/// across the hold: the holding member's partitions are read again once it
/// receives, and every message comes to one of the two.
#[tokio::test]
async fn a_member_that_holds_lets_its_group_rebalance() {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicBool, Ordering};

    use jobwire_transport::conformance::payloads;

    let (transport, topic, options, mut busy) = member_that_received_once("hold_rebalance").await;

    let stop_holding = Arc::new(AtomicBool::new(false));
    let holding = tokio::spawn({
        let stop_holding = stop_holding.clone();
        async move {
            while !stop_holding.load(Ordering::Relaxed) {
                busy.hold(Duration::from_millis(200)).await.expect("hold");
            }
            busy
        }
    });

    // The helper joins, then 40 messages with keys over every partition.
    let mut helper = transport.subscribe(&topic, &options).await.unwrap();
    let messages = keyed_messages(&topic, 40);
    let published = transport.publish(&messages).await;
    assert!(published.iter().all(Result::is_ok), "{published:?}");
    let all: BTreeSet<String> = (0..40).map(|i| format!("m{i}")).collect();

    let mut helper_got = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        let batch = helper.receive(100, Duration::from_secs(2)).await.unwrap();
        if batch.is_empty() && helper_got.iter().any(|label| all.contains(label)) {
            break;
        }
        helper_got.extend(payloads(&batch));
    }
    assert!(
        helper_got.iter().any(|label| all.contains(label)),
        "the helper received nothing in 60 s: the holding member held the group's rebalance up"
    );

    // The busy member frees a slot: its partitions are read again.
    stop_holding.store(true, Ordering::Relaxed);
    let mut busy = holding.await.unwrap();
    let mut busy_got = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline
        && !all
            .iter()
            .all(|l| helper_got.contains(l) || busy_got.contains(l))
    {
        let batch = busy.receive(100, Duration::from_secs(2)).await.unwrap();
        busy_got.extend(payloads(&batch));
    }
    assert!(
        busy_got.iter().any(|label| all.contains(label)),
        "the member that held received none of its partitions' messages afterwards"
    );
    let missing: Vec<_> = all
        .iter()
        .filter(|l| !helper_got.contains(*l) && !busy_got.contains(*l))
        .collect();
    assert!(missing.is_empty(), "lost across the hold: {missing:?}");

    busy.close().await.unwrap();
    helper.close().await.unwrap();
    let _ = transport.delete_topic(&topic).await;
}

/// A hold keeps what arrives up to a bound (1,000 deliveries), then pauses
/// the partitions; librdkafka drops what it fetched ahead for them and
/// fetches again from the position once the next receive resumes them.
/// Across that, every message comes exactly once.
#[tokio::test]
async fn a_long_hold_over_a_backlog_loses_and_repeats_nothing() {
    use std::collections::BTreeMap;

    use jobwire_transport::conformance::{payloads, receipts};

    let (transport, topic, _, mut subscriber) = member_that_received_once("hold_backlog").await;

    const BACKLOG: usize = 2_500;
    let messages = keyed_messages(&topic, BACKLOG);
    for chunk in messages.chunks(500) {
        let published = transport.publish(chunk).await;
        assert!(published.iter().all(Result::is_ok), "{published:?}");
    }
    // Busy for a while: long enough for the backlog to arrive.
    for _ in 0..10 {
        subscriber.hold(Duration::from_millis(300)).await.unwrap();
    }

    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    // The first receive returns what the hold kept: the bound, since the
    // backlog is larger (the rest was left to the broker).
    let kept = subscriber
        .receive(BACKLOG, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(kept.len(), 1_000, "a hold keeps 1,000 deliveries at most");
    subscriber.ack(&receipts(&kept)).await.unwrap();
    for label in payloads(&kept) {
        *seen.entry(label).or_default() += 1;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < BACKLOG && tokio::time::Instant::now() < deadline {
        let batch = subscriber
            .receive(500, Duration::from_secs(2))
            .await
            .unwrap();
        subscriber.ack(&receipts(&batch)).await.unwrap();
        for label in payloads(&batch) {
            *seen.entry(label).or_default() += 1;
        }
    }
    let extra = subscriber
        .receive(500, Duration::from_secs(2))
        .await
        .unwrap();
    for label in payloads(&extra) {
        *seen.entry(label).or_default() += 1;
    }
    let missing: Vec<_> = (0..BACKLOG)
        .map(|i| format!("m{i}"))
        .filter(|label| !seen.contains_key(label))
        .collect();
    assert!(
        missing.is_empty(),
        "{} lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let repeated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "delivered more than once: {repeated:?}"
    );
    assert_eq!(
        seen.len(),
        BACKLOG,
        "{:?}",
        seen.keys()
            .filter(|k| !k.starts_with('m'))
            .collect::<Vec<_>>()
    );

    subscriber.close().await.unwrap();
    let _ = transport.delete_topic(&topic).await;
}
