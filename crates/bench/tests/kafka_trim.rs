//! The bench's Kafka trim deletes exactly what a consumer group has
//! committed, against a real Kafka-protocol broker (`KAFKA_BOOTSTRAP`,
//! default `127.0.0.1:9092`): the records below the group's offsets go,
//! the ones after them stay and are still delivered.

use std::sync::Arc;
use std::time::Duration;

use jobwire_bench::kafka_trim::CommittedRecords;
use jobwire_test_support::brokers::kafka_bootstrap;
use jobwire_transport::conformance::{envelope, payloads, receipts, receive_count};
use jobwire_transport::kafka::{KafkaConfig, KafkaTransport};
use jobwire_transport::{SubscribeOptions, Transport};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};

/// The first offset still in the log, of the topic's partition 0.
async fn log_start(topic: &str) -> i64 {
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        client
            .fetch_watermarks(&topic, 0, Duration::from_secs(10))
            .unwrap()
            .0
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn only_what_the_group_committed_is_deleted() {
    let mut config = KafkaConfig::new(kafka_bootstrap());
    config.partitions = 1;
    config.timeout = Duration::from_secs(15);
    let transport: Arc<dyn Transport> = Arc::new(KafkaTransport::new(config).unwrap());
    let topic = format!("bench-trim-{}", uuid::Uuid::new_v4().simple());
    let group = format!("bench-trim-{}", uuid::Uuid::new_v4().simple());
    let options = SubscribeOptions {
        group: group.clone(),
        prefetch: 100,
        ..SubscribeOptions::default()
    };
    let publish = |label: String| {
        let transport = transport.clone();
        let message = envelope(&topic, Some("one-key"), label.as_bytes());
        async move {
            let results = transport.publish(&[message]).await;
            assert!(results.iter().all(Result::is_ok), "{results:?}");
        }
    };

    // Ten messages read and acknowledged by the group, five more after them
    // that it has not read.
    let mut member = transport.subscribe(&topic, &options).await.unwrap();
    for n in 0..10 {
        publish(format!("read-{n}")).await;
    }
    let read = receive_count(member.as_mut(), 10, Duration::from_secs(60)).await;
    assert_eq!(read.len(), 10, "{:?}", payloads(&read));
    member.ack(&receipts(&read)).await.unwrap();
    member.close().await.unwrap();
    for n in 0..5 {
        publish(format!("unread-{n}")).await;
    }
    assert_eq!(log_start(&topic).await, 0);

    // The member's commit is sent without waiting for it: trim until it
    // has landed.
    let mut records =
        CommittedRecords::new(&kafka_bootstrap(), &group, std::slice::from_ref(&topic)).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while records.delete().await.unwrap() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the group's offset never showed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        log_start(&topic).await,
        10,
        "the log must start at the group's offset"
    );
    assert_eq!(
        records.delete().await.unwrap(),
        0,
        "nothing more is committed, so nothing more is trimmed"
    );

    // The group's next member gets what it had not read, nothing before it.
    let mut next = transport.subscribe(&topic, &options).await.unwrap();
    let unread = receive_count(next.as_mut(), 5, Duration::from_secs(60)).await;
    let extra = next.receive(10, Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        payloads(&unread),
        (0..5).map(|n| format!("unread-{n}")).collect::<Vec<_>>()
    );
    assert!(extra.is_empty(), "delivered again: {:?}", payloads(&extra));
    next.close().await.unwrap();
    let _ = transport.delete_topic(&topic).await;
}
