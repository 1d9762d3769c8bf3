//! RabbitMQ passes the conformance suite against a real broker
//! (`AMQP_URL`, default the local one), gives back what was pushed ahead
//! while it holds, and bounds what a connection whose network died can
//! hold up.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jobwire_test_support::FlakyProxy;
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

/// A queue deleted behind the publishing session's back (by hand, by an
/// `expires` policy, by another process): the session still counts it as
/// declared, and on the default exchange a message no queue takes was
/// confirmed and dropped, so the relay deleted the outbox row of a wake-up
/// that went nowhere. The publish now fails as unavailable, and the next one
/// declares the queue again and is delivered.
#[tokio::test]
async fn a_publish_to_a_queue_deleted_behind_the_sessions_back_fails_and_the_next_declares_it() {
    use jobwire_transport::conformance::{envelope, payloads, receipts, receive_count};
    use jobwire_transport::{PublishError, SubscribeOptions};

    let transport = RabbitTarget.transport().await;
    let topic = RabbitTarget.topic("deleted_behind");
    let first = envelope(&topic, None, b"first");
    assert!(transport.publish(&[first]).await.iter().all(Result::is_ok));

    let connection = lapin::Connection::connect(&url(), lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .queue_delete(
            topic.as_str().into(),
            lapin::options::QueueDeleteOptions::default(),
        )
        .await
        .unwrap();
    let _ = connection.close(200, "done".into()).await;

    let lost = envelope(&topic, None, b"lost");
    let results = transport.publish(&[lost]).await;
    assert!(
        matches!(results[..], [Err(PublishError::Unavailable(_))]),
        "{results:?}"
    );
    let again = envelope(&topic, None, b"again");
    assert!(transport.publish(&[again]).await.iter().all(Result::is_ok));
    let mut consumer = transport
        .subscribe(&topic, &SubscribeOptions::default())
        .await
        .unwrap();
    let received = receive_count(consumer.as_mut(), 1, Duration::from_secs(30)).await;
    assert_eq!(payloads(&received), vec!["again"]);
    consumer.ack(&receipts(&received)).await.unwrap();
    consumer.close().await.unwrap();
    let _ = transport.delete_topic(&topic).await;
}

/// A session over the proxy, with a short timeout: what a network that dies
/// under a live connection does to it is what these tests look at.
fn via(proxy: &FlakyProxy) -> RabbitConfig {
    let mut config = RabbitConfig::new(format!("amqp://guest:guest@{}/%2f", proxy.addr));
    config.timeout = STALL_TIMEOUT;
    config
}

/// The transport's timeout in the stall tests.
const STALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Far above [`STALL_TIMEOUT`] and far below what noticing the dead
/// network by missed heartbeats takes (RabbitMQ proposes 60 s between
/// them): a call still waiting by then waits for the heartbeats, not for
/// the transport's own bound.
const NOT_HUNG: Duration = Duration::from_secs(30);

/// One delivery received (and acked) on `subscriber`, or `None` if the
/// receive hung past [`NOT_HUNG`].
async fn receive_one(
    subscriber: &mut dyn jobwire_transport::Subscriber,
) -> Option<Vec<jobwire_transport::Delivery>> {
    use jobwire_transport::conformance::{receipts, receive_count};

    let received = tokio::time::timeout(
        NOT_HUNG,
        receive_count(subscriber, 1, Duration::from_secs(10)),
    )
    .await
    .ok()?;
    subscriber.ack(&receipts(&received)).await.unwrap();
    Some(received)
}

/// A publish on a connection whose network died (the TCP connection stays
/// open and carries nothing) fails within the transport's timeout instead
/// of waiting for heartbeats, and leaves nothing behind that blocks the
/// next publish: it connects again and is delivered. What the failed
/// publish sent never reached the broker (the relay publishes its rows
/// again).
#[tokio::test]
async fn a_publish_on_a_stalled_connection_fails_within_its_timeout_and_the_next_one_connects_again()
 {
    use jobwire_transport::conformance::{envelope, payloads, receipts, receive_count};
    use jobwire_transport::{PublishError, SubscribeOptions};

    let proxy = FlakyProxy::start("127.0.0.1:5672", true).await.unwrap();
    let stalling = RabbitTransport::new(via(&proxy));
    let direct = RabbitTarget.transport().await;
    let topic = RabbitTarget.topic("publish_stalled");
    let mut subscriber = direct
        .subscribe(&topic, &SubscribeOptions::default())
        .await
        .unwrap();

    let before = stalling.publish(&[envelope(&topic, None, b"before")]).await;
    proxy.stall_live();
    let stalled = tokio::time::timeout(
        NOT_HUNG,
        stalling.publish(&[envelope(&topic, None, b"stalled")]),
    )
    .await;
    let after = tokio::time::timeout(
        NOT_HUNG,
        stalling.publish(&[envelope(&topic, None, b"after")]),
    )
    .await;
    let received = receive_count(subscriber.as_mut(), 2, Duration::from_secs(10)).await;
    subscriber.ack(&receipts(&received)).await.unwrap();
    let more = subscriber.receive(10, Duration::from_millis(500)).await;

    subscriber.close().await.unwrap();
    let _ = direct.delete_topic(&topic).await;
    assert!(before.iter().all(Result::is_ok), "{before:?}");
    let stalled = stalled.expect("the publish on the stalled connection hung");
    assert!(
        matches!(stalled.as_slice(), [Err(PublishError::Unavailable(_))]),
        "{stalled:?}"
    );
    let after = after.expect("the next publish hung");
    assert!(after.iter().all(Result::is_ok), "{after:?}");
    assert_eq!(payloads(&received), vec!["before", "after"]);
    assert!(more.unwrap().is_empty());
}

/// A hold on a consumer whose network died: closing its channel gets no
/// answer, so the hold gives the connection up within the transport's
/// timeout, and the next receive connects again and gets what is published
/// after. Until the broker notices the dead connection (missed heartbeats)
/// it counts the old consumer as live and may push it wake-ups, up to its
/// prefetch; here that consumer's one place is taken by a delivery it never
/// settled, so whatever comes next goes to the new one. That delivery
/// comes back once the broker ends the old connection.
#[tokio::test]
async fn a_hold_on_a_stalled_connection_gives_it_up_and_the_next_receive_connects_again() {
    use jobwire_transport::SubscribeOptions;
    use jobwire_transport::conformance::{envelope, payloads, receive_count};

    let proxy = FlakyProxy::start("127.0.0.1:5672", true).await.unwrap();
    let direct = RabbitTarget.transport().await;
    let topic = RabbitTarget.topic("hold_stalled");
    let options = SubscribeOptions {
        prefetch: 1,
        ..SubscribeOptions::default()
    };
    let mut subscriber = RabbitTransport::new(via(&proxy))
        .subscribe(&topic, &options)
        .await
        .unwrap();
    let first = direct.publish(&[envelope(&topic, None, b"first")]).await;
    let unsettled = receive_count(subscriber.as_mut(), 1, Duration::from_secs(10)).await;

    proxy.stall_live();
    let held = tokio::time::timeout(NOT_HUNG, subscriber.hold(Duration::from_millis(10))).await;
    let sent = direct
        .publish(&[envelope(&topic, None, b"after the hold")])
        .await;
    let received = receive_one(subscriber.as_mut()).await;

    let closed = tokio::time::timeout(NOT_HUNG, subscriber.close()).await;
    drop(proxy);
    let _ = direct.delete_topic(&topic).await;
    assert!(first.iter().all(Result::is_ok), "{first:?}");
    assert_eq!(payloads(&unsettled), vec!["first"]);
    held.expect("the hold hung on the stalled connection")
        .unwrap();
    assert!(sent.iter().all(Result::is_ok), "{sent:?}");
    let received = received.expect("the receive after the hold hung");
    assert_eq!(payloads(&received), vec!["after the hold"]);
    closed.expect("closing hung").unwrap();
}

/// A hold on a healthy consumer keeps its connection; if the network dies
/// during the hold, the kept connection still reads as connected, opening a
/// channel on it gets no answer, and the next receive gives it up within
/// the transport's timeout and connects again.
#[tokio::test]
async fn a_connection_kept_by_a_hold_that_stalls_is_replaced_by_the_next_receive() {
    use jobwire_transport::SubscribeOptions;
    use jobwire_transport::conformance::{envelope, payloads};

    let proxy = FlakyProxy::start("127.0.0.1:5672", true).await.unwrap();
    let direct = RabbitTarget.transport().await;
    let topic = RabbitTarget.topic("kept_stalled");
    let mut subscriber = RabbitTransport::new(via(&proxy))
        .subscribe(&topic, &SubscribeOptions::default())
        .await
        .unwrap();
    // Connected (a receive connects), then held: the channel is closed and
    // the connection kept.
    let nothing = subscriber.receive(1, Duration::from_millis(100)).await;
    subscriber.hold(Duration::from_millis(10)).await.unwrap();
    proxy.stall_live();

    let sent = direct
        .publish(&[envelope(&topic, None, b"after the stall")])
        .await;
    let received = receive_one(subscriber.as_mut()).await;

    let closed = tokio::time::timeout(NOT_HUNG, subscriber.close()).await;
    let _ = direct.delete_topic(&topic).await;
    assert!(nothing.unwrap().is_empty());
    assert!(sent.iter().all(Result::is_ok), "{sent:?}");
    let received = received.expect("the receive after the stall hung");
    assert_eq!(payloads(&received), vec!["after the stall"]);
    closed.expect("closing hung").unwrap();
}

/// Closing a consumer whose network died, live or held (its connection
/// kept), waits for no answer past the transport's timeout.
#[tokio::test]
async fn closing_a_stalled_consumer_live_or_held_returns_within_its_timeout() {
    use jobwire_transport::SubscribeOptions;

    let proxy = FlakyProxy::start("127.0.0.1:5672", true).await.unwrap();
    let direct = RabbitTarget.transport().await;
    let topic = RabbitTarget.topic("close_stalled");
    let transport = RabbitTransport::new(via(&proxy));
    let options = SubscribeOptions::default();
    let mut live = transport.subscribe(&topic, &options).await.unwrap();
    let mut held = transport.subscribe(&topic, &options).await.unwrap();
    // Both connected (a receive connects); the second holds, its channel
    // closed and its connection kept.
    let live_nothing = live.receive(1, Duration::from_millis(100)).await;
    let held_nothing = held.receive(1, Duration::from_millis(100)).await;
    held.hold(Duration::from_millis(10)).await.unwrap();
    proxy.stall_live();

    let live_closed = tokio::time::timeout(NOT_HUNG, live.close()).await;
    let held_closed = tokio::time::timeout(NOT_HUNG, held.close()).await;
    drop(proxy);
    let _ = direct.delete_topic(&topic).await;
    assert!(live_nothing.unwrap().is_empty());
    assert!(held_nothing.unwrap().is_empty());
    live_closed
        .expect("closing the live consumer hung")
        .unwrap();
    held_closed
        .expect("closing the held consumer hung")
        .unwrap();
}
