//! RabbitMQ passes the conformance suite against a real broker
//! (`AMQP_URL`, default the local one).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jobwire_transport::Transport;
use jobwire_transport::conformance::ConformanceTarget;
use jobwire_transport::rabbitmq::{RabbitConfig, RabbitTransport};

struct RabbitTarget;

fn url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

#[async_trait]
impl ConformanceTarget for RabbitTarget {
    async fn transport(&self) -> Arc<dyn Transport> {
        Arc::new(RabbitTransport::new(RabbitConfig::new(url())))
    }

    async fn unreachable(&self) -> Arc<dyn Transport> {
        let mut config = RabbitConfig::new("amqp://guest:guest@127.0.0.1:1/%2f");
        config.timeout = Duration::from_secs(5);
        Arc::new(RabbitTransport::new(config))
    }

    fn topic(&self, scenario: &str) -> String {
        format!("conformance.{scenario}.{}", uuid::Uuid::new_v4().simple())
    }
}

jobwire_transport::conformance_tests!(RabbitTarget);

/// The broker pushes a consumer up to its prefetch of deliveries before
/// they are asked for. While the consumer's caller holds (every slot busy)
/// those go back to the queue, where another consumer takes them at once;
/// otherwise they would wait for the busy one's jobs while the other sat
/// idle. (That the holding consumer keeps its connection is a unit test of
/// the subscriber.)
#[tokio::test]
async fn a_holding_subscriber_gives_back_what_was_pushed_ahead() {
    use std::collections::BTreeSet;

    use jobwire_transport::SubscribeOptions;
    use jobwire_transport::conformance::{envelope, payloads, receipts, receive_count};

    let transport = RabbitTarget.transport().await;
    let topic = RabbitTarget.topic("hold_gives_back");
    let options = SubscribeOptions {
        prefetch: 4,
        ..SubscribeOptions::default()
    };

    // The busy consumer takes one delivery (it is connected from then on).
    let mut busy = transport.subscribe(&topic, &options).await.unwrap();
    let first = envelope(&topic, None, b"first");
    assert!(transport.publish(&[first]).await.iter().all(Result::is_ok));
    let received = receive_count(busy.as_mut(), 1, Duration::from_secs(30)).await;
    assert_eq!(payloads(&received), vec!["first"]);
    busy.ack(&receipts(&received)).await.unwrap();

    // Eight more while it asks for none: the broker pushes it four ahead.
    let messages: Vec<_> = (0..8)
        .map(|i| envelope(&topic, None, format!("m{i}").as_bytes()))
        .collect();
    assert!(transport.publish(&messages).await.iter().all(Result::is_ok));
    // Wait until the broker has pushed four to the busy consumer: four left
    // ready in the queue.
    let ready = || async {
        let connection = lapin::Connection::connect(&url(), lapin::ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        let queue = channel
            .queue_declare(
                topic.as_str().into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await
            .unwrap();
        let _ = connection.close(200, "done".into()).await;
        queue.message_count()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while ready().await != 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broker never pushed four ahead"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    busy.hold(Duration::from_millis(100)).await.unwrap();

    let mut helper = transport.subscribe(&topic, &options).await.unwrap();
    let mut taken = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while taken.len() < 8 && tokio::time::Instant::now() < deadline {
        let batch = helper.receive(4, Duration::from_secs(2)).await.unwrap();
        helper.ack(&receipts(&batch)).await.unwrap();
        taken.extend(batch);
    }
    let all: BTreeSet<String> = (0..8).map(|i| format!("m{i}")).collect();
    assert_eq!(
        payloads(&taken).into_iter().collect::<BTreeSet<_>>(),
        all,
        "the helper did not get what the holding consumer had been pushed"
    );

    // The holding consumer consumes again as it receives; nothing comes twice.
    let again = busy.receive(10, Duration::from_secs(2)).await.unwrap();
    assert!(again.is_empty(), "delivered again: {:?}", payloads(&again));

    busy.close().await.unwrap();
    helper.close().await.unwrap();
    let _ = transport.delete_topic(&topic).await;
}
