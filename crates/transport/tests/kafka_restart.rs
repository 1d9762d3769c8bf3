//! The Kafka transport publishes again after the broker restarts, through
//! the same transport: the relay holds one for its whole life.
//!
//! A broker that keeps its state in memory (nisshi, the test broker) comes
//! back without the producer ids it handed out, and the idempotent producer
//! then fails with a fatal "unknown producer id" error: every later send
//! through it fails too. The transport must start a new producer.
//!
//! It restarts the shared broker (`scripts/services restart kafka`), so it
//! is the only test in this binary: `cargo test` runs test binaries one
//! after another, never beside each other, so no other test sees the
//! restart.

use std::time::Duration;

use jobwire_transport::conformance::{envelope, receive_count};
use jobwire_transport::kafka::{KafkaConfig, KafkaTransport};
use jobwire_transport::{SubscribeOptions, Transport};

/// How long publishing may keep failing after the restart before the test
/// calls the transport stuck: generous, the exact figure is not the point.
const RECOVERY_CEILING: Duration = Duration::from_secs(90);

#[tokio::test]
async fn publishing_works_again_after_the_broker_restarts() {
    let bootstrap = std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let mut config = KafkaConfig::new(bootstrap);
    config.timeout = Duration::from_secs(10);
    let transport = KafkaTransport::new(config).expect("kafka transport");
    let topic = format!("restart.{}", uuid::Uuid::new_v4().simple());

    // The producer sends under its id, with sequence numbers the broker
    // will have forgotten.
    for round in 0..5 {
        let sent = transport
            .publish(&[envelope(
                &topic,
                Some("one-key"),
                format!("before {round}").as_bytes(),
            )])
            .await;
        assert!(sent.iter().all(Result::is_ok), "{sent:?}");
    }

    let services = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/services");
    let restart = tokio::process::Command::new(services)
        .args(["restart", "kafka"])
        .output()
        .await
        .expect("scripts/services runs");
    assert!(
        restart.status.success(),
        "restart failed: {}",
        String::from_utf8_lossy(&restart.stderr)
    );

    // Sent again until it is confirmed, as the relay does with a row whose
    // publish failed.
    let deadline = tokio::time::Instant::now() + RECOVERY_CEILING;
    let mut failures = Vec::new();
    loop {
        let sent = transport
            .publish(&[envelope(&topic, Some("one-key"), b"after")])
            .await;
        match sent.into_iter().next().expect("one result") {
            Ok(()) => break,
            Err(err) => failures.push(err.to_string()),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "publishing kept failing for {} s after the restart; the last errors: {:?}",
            RECOVERY_CEILING.as_secs(),
            &failures[failures.len().saturating_sub(3)..]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The message is really there: a subscriber gets it. The broker came
    // back empty, so it is the only one on the topic.
    let options = SubscribeOptions {
        group: format!("restart-{}", uuid::Uuid::new_v4().simple()),
        ..SubscribeOptions::default()
    };
    let mut subscriber = transport.subscribe(&topic, &options).await.unwrap();
    let received = receive_count(subscriber.as_mut(), 1, Duration::from_secs(30)).await;
    let payloads: Vec<&[u8]> = received.iter().map(|d| d.payload.as_slice()).collect();
    assert_eq!(payloads, vec![b"after".as_slice()]);
    subscriber.close().await.unwrap();
    transport.close().await.unwrap();
}
