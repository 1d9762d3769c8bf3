//! SQS, standard and FIFO queues, passes the conformance suite against a real
//! SQS server (`SQS_ENDPOINT`, default the local emulator).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jobwire_transport::conformance::ConformanceTarget;
use jobwire_transport::sqs::{SqsConfig, SqsTransport};
use jobwire_transport::{SubscribeOptions, Transport};

struct SqsTarget {
    fifo: bool,
}

fn endpoint() -> String {
    std::env::var("SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
}

#[async_trait]
impl ConformanceTarget for SqsTarget {
    async fn transport(&self) -> Arc<dyn Transport> {
        let mut config = SqsConfig::local(endpoint());
        config.fifo = self.fifo;
        Arc::new(SqsTransport::new(config).await)
    }

    async fn unreachable(&self) -> Arc<dyn Transport> {
        let mut config = SqsConfig::local("http://127.0.0.1:1");
        config.fifo = self.fifo;
        config.timeout = Duration::from_secs(5);
        Arc::new(SqsTransport::new(config).await)
    }

    fn topic(&self, scenario: &str) -> String {
        // A fresh queue per scenario keeps the emulator fast.
        format!(
            "conf-{scenario}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        )
    }

    fn subscribe_options(&self) -> SubscribeOptions {
        SubscribeOptions {
            visibility_timeout: Duration::from_secs(30),
            ..SubscribeOptions::default()
        }
    }
}

mod standard {
    use super::SqsTarget;
    jobwire_transport::conformance_tests!(SqsTarget { fifo: false });
}

mod fifo {
    use super::SqsTarget;
    jobwire_transport::conformance_tests!(SqsTarget { fifo: true });
}

/// A queue deleted under its subscriber (an emulator restarted empty, a
/// queue removed by hand) is created again by the subscriber. Before, its
/// receive failed every few seconds until the relay next published to it,
/// which on a quiet queue might be never: the worker logged "receive
/// failed" for ever while the queue's wake-ups had nowhere to go. Now one
/// receive says so, and the next one works.
#[tokio::test]
async fn a_subscriber_creates_its_queue_again_once_it_is_gone() {
    let target = SqsTarget { fifo: false };
    let transport = target.transport().await;
    let topic = target.topic("gone");
    let mut subscriber = transport
        .subscribe(&topic, &target.subscribe_options())
        .await
        .unwrap();
    transport.delete_topic(&topic).await.unwrap();
    let err = subscriber
        .receive(1, Duration::ZERO)
        .await
        .expect_err("the queue is gone")
        .to_string();
    assert!(err.contains("created the queue again"), "{err}");
    assert!(
        subscriber.receive(1, Duration::ZERO).await.is_ok(),
        "the queue is back"
    );
    let sent = jobwire_transport::conformance::envelope(&topic, None, b"{\"after\": true}");
    let published = transport.publish(std::slice::from_ref(&sent)).await;
    assert!(published.iter().all(Result::is_ok), "{published:?}");
    let mut received = Vec::new();
    for _ in 0..10 {
        received = subscriber.receive(1, Duration::from_secs(1)).await.unwrap();
        if !received.is_empty() {
            break;
        }
    }
    assert_eq!(
        received.len(),
        1,
        "the wake-up published after it came back"
    );
    assert_eq!(received[0].payload, sent.payload);
    transport.delete_topic(&topic).await.unwrap();
}

/// A batch delete or visibility change that SQS refuses entry by entry (the
/// call itself succeeds) is an error, not silence: here the give-back of a
/// message already deleted.
#[tokio::test]
async fn an_entry_sqs_refuses_in_a_batch_is_an_error() {
    use jobwire_transport::conformance::{envelope, receipts, receive_count};

    let target = SqsTarget { fifo: false };
    let transport = target.transport().await;
    let topic = target.topic("refused");
    let mut subscriber = transport
        .subscribe(&topic, &target.subscribe_options())
        .await
        .unwrap();
    let results = transport.publish(&[envelope(&topic, None, b"{}")]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let received = receive_count(subscriber.as_mut(), 1, Duration::from_secs(30)).await;
    assert_eq!(received.len(), 1);
    subscriber.ack(&receipts(&received)).await.unwrap();
    let refused = subscriber.nack(&receipts(&received), true).await;
    assert!(
        matches!(&refused, Err(jobwire_transport::TransportError::Refused(text)) if text.contains("1 of 1")),
        "{refused:?}"
    );
    subscriber.close().await.unwrap();
    let _ = transport.delete_topic(&topic).await;
}
