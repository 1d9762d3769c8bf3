//! Where an urgent job's time goes on a broker path: a [`Transport`] the
//! bench hands to the relay and the worker in place of the real one, which
//! passes everything through and notes, per job of the watched topics, when
//! the relay handed its wake-up to the broker, when the broker confirmed it
//! and when a subscriber received it. Together with the database's own
//! timestamps (enqueue, claim) and the handler's start, that splits
//! enqueue → start into the stages of [`StageLatency`](crate::StageLatency).
//!
//! Everything runs in one process on one machine, so these wall-clock
//! stamps and PostgreSQL's `now()` read the same clock.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use jobwire_transport::{
    Capabilities, Delivery, Envelope, Headers, PublishError, Receipt, SubscribeOptions, Subscriber,
    Transport, TransportError, header,
};
use uuid::Uuid;

/// What the transport saw of one job's wake-up; the first of each counts
/// (a wake-up published or delivered again later changes nothing here).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WakeUpStamps {
    /// The relay called `publish` with it (its outbox row claimed).
    pub(crate) published: Option<DateTime<Utc>>,
    /// `publish` returned it confirmed.
    pub(crate) confirmed: Option<DateTime<Utc>>,
    /// A subscriber's `receive` returned it.
    pub(crate) delivered: Option<DateTime<Utc>>,
}

/// The stamps of every watched job, shared by the transport and its subscribers.
pub(crate) struct StageClock {
    topics: HashSet<String>,
    stamps: Mutex<HashMap<Uuid, WakeUpStamps>>,
}

impl StageClock {
    /// A clock for the wake-ups travelling on `topics`.
    pub(crate) fn new(topics: impl IntoIterator<Item = String>) -> Arc<Self> {
        Arc::new(StageClock {
            topics: topics.into_iter().collect(),
            stamps: Mutex::default(),
        })
    }

    /// The stamps of every job seen so far.
    pub(crate) fn stamps(&self) -> HashMap<Uuid, WakeUpStamps> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, WakeUpStamps>> {
        self.stamps
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn note(
        &self,
        jobs: impl Iterator<Item = Uuid>,
        at: DateTime<Utc>,
        field: fn(&mut WakeUpStamps) -> &mut Option<DateTime<Utc>>,
    ) {
        let mut stamps = self.lock();
        for job in jobs {
            field(stamps.entry(job).or_default()).get_or_insert(at);
        }
    }
}

/// The job a wake-up names (the header every jobwire wake-up carries).
fn job_of(headers: &Headers) -> Option<Uuid> {
    headers.get(header::JOB_ID)?.parse().ok()
}

/// The real transport, with the watched topics' wake-ups stamped.
pub(crate) struct TimedTransport {
    inner: Arc<dyn Transport>,
    clock: Arc<StageClock>,
}

impl TimedTransport {
    pub(crate) fn wrap(inner: Arc<dyn Transport>, clock: Arc<StageClock>) -> Arc<dyn Transport> {
        Arc::new(TimedTransport { inner, clock })
    }
}

#[async_trait]
impl Transport for TimedTransport {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn address(&self) -> String {
        self.inner.address()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Result<(), PublishError>> {
        let published = Utc::now();
        let results = self.inner.publish(batch).await;
        let confirmed = Utc::now();
        let watched = || {
            batch
                .iter()
                .zip(&results)
                .filter(|(envelope, result)| {
                    result.is_ok() && self.clock.topics.contains(&envelope.topic)
                })
                .filter_map(|(envelope, _)| job_of(&envelope.headers))
        };
        self.clock.note(watched(), published, |s| &mut s.published);
        self.clock.note(watched(), confirmed, |s| &mut s.confirmed);
        results
    }

    async fn subscribe(
        &self,
        topic: &str,
        options: &SubscribeOptions,
    ) -> Result<Box<dyn Subscriber>, TransportError> {
        let inner = self.inner.subscribe(topic, options).await?;
        if !self.clock.topics.contains(topic) {
            return Ok(inner);
        }
        Ok(Box::new(TimedSubscriber {
            inner,
            clock: self.clock.clone(),
        }))
    }

    async fn close(&self) -> Result<(), TransportError> {
        self.inner.close().await
    }

    async fn purge(&self, topic: &str) -> Result<Option<u64>, TransportError> {
        self.inner.purge(topic).await
    }

    async fn delete_topic(&self, topic: &str) -> Result<(), TransportError> {
        self.inner.delete_topic(topic).await
    }
}

/// A subscriber on a watched topic: deliveries stamped as they arrive.
struct TimedSubscriber {
    inner: Box<dyn Subscriber>,
    clock: Arc<StageClock>,
}

#[async_trait]
impl Subscriber for TimedSubscriber {
    async fn receive(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, TransportError> {
        let deliveries = self.inner.receive(max, wait).await?;
        let delivered = Utc::now();
        self.clock.note(
            deliveries.iter().filter_map(|d| job_of(&d.headers)),
            delivered,
            |s| &mut s.delivered,
        );
        Ok(deliveries)
    }

    async fn hold(&mut self, wait: Duration) -> Result<(), TransportError> {
        self.inner.hold(wait).await
    }

    async fn ack(&mut self, receipts: &[Receipt]) -> Result<(), TransportError> {
        self.inner.ack(receipts).await
    }

    async fn nack(&mut self, receipts: &[Receipt], requeue: bool) -> Result<(), TransportError> {
        self.inner.nack(receipts, requeue).await
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobwire_transport::memory::MemoryTransport;

    fn wake_up(topic: &str, job: Uuid) -> Envelope {
        let mut headers = Headers::new();
        headers.insert(header::JOB_ID.into(), job.to_string());
        Envelope {
            outbox_id: 1,
            topic: topic.into(),
            key: Some(job.to_string()),
            payload: b"{}".to_vec(),
            headers,
        }
    }

    #[tokio::test]
    async fn watched_wake_ups_are_stamped_in_order_and_others_are_not() {
        let clock = StageClock::new(["urgent".to_string()]);
        let transport = TimedTransport::wrap(Arc::new(MemoryTransport::default()), clock.clone());
        let options = SubscribeOptions::default();
        let mut urgent = transport.subscribe("urgent", &options).await.unwrap();
        let mut bulk = transport.subscribe("bulk", &options).await.unwrap();
        let (urgent_job, bulk_job) = (Uuid::new_v4(), Uuid::new_v4());
        let results = transport
            .publish(&[wake_up("urgent", urgent_job), wake_up("bulk", bulk_job)])
            .await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let got = urgent.receive(10, Duration::from_secs(5)).await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            bulk.receive(10, Duration::from_secs(5))
                .await
                .unwrap()
                .len(),
            1
        );

        let stamps = clock.stamps();
        assert_eq!(stamps.len(), 1, "only the watched topic: {stamps:?}");
        let urgent_stamps = stamps[&urgent_job];
        let (published, confirmed, delivered) = (
            urgent_stamps.published.unwrap(),
            urgent_stamps.confirmed.unwrap(),
            urgent_stamps.delivered.unwrap(),
        );
        assert!(
            published <= confirmed && confirmed <= delivered,
            "{urgent_stamps:?}"
        );

        // A second delivery of the same wake-up keeps the first stamp.
        urgent.nack(&[got[0].receipt.clone()], true).await.unwrap();
        assert_eq!(
            urgent
                .receive(10, Duration::from_secs(5))
                .await
                .unwrap()
                .len(),
            1
        );
        assert_eq!(clock.stamps()[&urgent_job].delivered, Some(delivered));
    }
}
