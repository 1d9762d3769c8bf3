//! The broker path of a queue: deliveries are wake-ups for one fenced claim
//! per received batch; a safety net claims straight from the table what
//! the broker path left waiting too long.

use std::sync::Arc;
use std::time::Duration;

use jobwire_core::ClaimMiss;
use jobwire_loop::{Outage, POLL_SPREAD, Pause, jittered, sleep};
use jobwire_transport::{Delivery, Receipt, SubscribeOptions, Subscriber, Transport, header};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::JobRuntime;
use crate::metrics::{self, ClaimPath};
use crate::stats::{WorkerStats, bump};

/// The job a wake-up names: the `jobwire-job-id` header, or `job_id` in a
/// JSON body. `None` for anything else (garbage is acked, never run).
fn woken_job(delivery: &Delivery) -> Option<uuid::Uuid> {
    if let Some(id) = delivery.headers.get(header::JOB_ID)
        && let Ok(id) = id.parse()
    {
        return Some(id);
    }
    let body: serde_json::Value = serde_json::from_slice(&delivery.payload).ok()?;
    body.get("job_id")?.as_str()?.parse().ok()
}

fn count_miss(stats: &WorkerStats, topic: &str, miss: &ClaimMiss) {
    bump(match miss {
        ClaimMiss::Unknown => &stats.wake_ups_unknown,
        ClaimMiss::Held => &stats.wake_ups_held,
        ClaimMiss::Finished { .. } => &stats.wake_ups_finished,
        ClaimMiss::NotDue { .. } => &stats.wake_ups_not_due,
        ClaimMiss::Contended => &stats.wake_ups_contended,
        ClaimMiss::Paused => &stats.wake_ups_paused,
        ClaimMiss::OtherQueue { .. } => &stats.wake_ups_other_queue,
        ClaimMiss::Capped => &stats.wake_ups_capped,
        #[allow(unreachable_patterns)]
        _ => &stats.wake_ups_unknown,
    });
    metrics::record_wake_ups(topic, miss.label(), 1);
}

/// Subscribe to `topic`, retrying until it works or `stop`. Meanwhile the
/// safety net keeps claiming from the table on the free slots: a broker
/// that refuses this worker (down, a wrong address or password) must cost
/// latency, not progress.
async fn subscribe(
    queue: &BrokerQueue,
    slots: &Arc<Semaphore>,
    safety_net: &mut Option<SafetyNet>,
    stop: &CancellationToken,
) -> Option<Box<dyn Subscriber>> {
    let topic = &queue.topic;
    let mut pause = Pause::standard();
    let mut outage = Outage::new();
    loop {
        match queue.transport.subscribe(topic, &queue.options).await {
            Ok(subscriber) => {
                if let Some(ended) = outage.succeeded() {
                    tracing::info!(%topic, "subscribed {ended}");
                }
                return Some(subscriber);
            }
            Err(err) => {
                outage.failed();
                tracing::warn!(%topic, address = %queue.transport.address(), error = %err,
                    "cannot subscribe; retrying");
                let mut wait = pause.next_after_failure();
                if stop.is_cancelled() {
                    return None;
                }
                if let Some(net) = safety_net {
                    let mut free = Vec::new();
                    take_free_slots(slots, &mut free);
                    net.claim_if_due(&queue.runtime, &queue.queue, &mut free)
                        .await;
                    // Back in time for the net's next look.
                    wait = wait.min(net.interval);
                }
                if sleep(wait, stop).await.is_cancelled() {
                    return None;
                }
            }
        }
    }
}

/// Every slot free at this moment, added to `free`.
fn take_free_slots(slots: &Arc<Semaphore>, free: &mut Vec<OwnedSemaphorePermit>) {
    while let Ok(slot) = slots.clone().try_acquire_owned() {
        free.push(slot);
    }
}

/// One broker-dispatched queue as a worker serves it.
pub(crate) struct BrokerQueue {
    pub(crate) runtime: JobRuntime,
    pub(crate) transport: Arc<dyn Transport>,
    /// The topic its wake-ups travel on.
    pub(crate) topic: String,
    /// The queue.
    pub(crate) queue: String,
    /// Every queue this worker serves from `topic` (usually just `queue`): a
    /// wake-up for a job of any other queue claims nothing.
    pub(crate) served_from_topic: Vec<String>,
    pub(crate) options: SubscribeOptions,
    pub(crate) concurrency: usize,
    pub(crate) receive_wait: Duration,
    pub(crate) safety_net: Option<SafetyNet>,
}

/// Receive wake-ups for one broker-dispatched queue and run the jobs they
/// let this worker claim, until `stop`; meanwhile the safety net claims
/// jobs the broker path left waiting past its bound.
pub(crate) async fn consume_queue(mut queue: BrokerQueue, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(queue.concurrency));
    let mut safety_net = queue.safety_net.take();
    let Some(mut subscriber) = subscribe(&queue, &slots, &mut safety_net, &stop).await else {
        return;
    };
    let BrokerQueue {
        runtime,
        transport,
        topic,
        queue,
        served_from_topic,
        receive_wait,
        ..
    } = queue;
    let stats = runtime.stats();
    let mut pause = Pause::standard();
    let mut receive_outage = Outage::new();
    let mut claim_outage = Outage::new();
    loop {
        // Receive only as many wake-ups as there are free slots: the broker
        // keeps the rest (and other workers can take them).
        let Some(first) =
            wait_for_a_slot(&slots, subscriber.as_mut(), &topic, receive_wait, &stop).await
        else {
            break;
        };
        let mut free = vec![first];
        take_free_slots(&slots, &mut free);
        let received = tokio::select! {
            received = subscriber.receive(free.len(), receive_wait) => received,
            _ = stop.cancelled() => break,
        };
        let deliveries = match received {
            Ok(deliveries) => deliveries,
            Err(err) => {
                receive_outage.failed();
                tracing::warn!(%topic, address = %transport.address(), error = %err,
                    "receive failed; retrying");
                // The broker is away: the table is not.
                if let Some(net) = &mut safety_net {
                    net.claim_if_due(&runtime, &queue, &mut free).await;
                }
                drop(free);
                if sleep(pause.next_after_failure(), &stop)
                    .await
                    .is_cancelled()
                {
                    break;
                }
                continue;
            }
        };
        pause.reset();
        if let Some(ended) = receive_outage.succeeded() {
            tracing::info!(%topic, address = %transport.address(), "receiving again {ended}");
        }
        if !deliveries.is_empty() {
            let claimed = claim_woken(
                &runtime,
                subscriber.as_mut(),
                &topic,
                &served_from_topic,
                &deliveries,
                &mut free,
                &stats,
            )
            .await;
            if claimed.is_err() {
                claim_outage.failed();
                drop(free);
                if sleep(pause.next_after_failure(), &stop)
                    .await
                    .is_cancelled()
                {
                    break;
                }
                continue;
            }
            if let Some(ended) = claim_outage.succeeded() {
                tracing::info!(%topic, "claiming woken jobs again {ended}");
            }
        }
        if let Some(net) = &mut safety_net {
            net.claim_if_due(&runtime, &queue, &mut free).await;
        }
        drop(free);
    }
    if let Err(err) = subscriber.close().await {
        tracing::warn!(%topic, error = %err, "closing the subscriber failed");
    }
}

/// How long every slot must stay busy before the subscriber is asked to
/// hold: a slot usually frees within moments, and a hold can cost a wait
/// once a slot frees (RabbitMQ opens a channel again on the connection it
/// kept; Kafka, past 1,000 kept wake-ups, fetches its paused partitions
/// again, about a second).
const HOLD_AFTER: Duration = Duration::from_millis(500);

/// Wait for a free slot; `None` at `stop`. While every slot stays busy the
/// subscriber holds: it takes nothing but keeps its subscription alive. A
/// Kafka group member that stops polling holds up every rebalance of its
/// group, so without this a worker started to help with a busy queue, or
/// any worker of it stopping, would wait until one of this worker's jobs
/// finished (up to five minutes, when librdkafka drops the silent member);
/// and what RabbitMQ pushed ahead to this consumer would wait here while
/// another worker sat idle.
async fn wait_for_a_slot(
    slots: &Arc<Semaphore>,
    subscriber: &mut dyn Subscriber,
    topic: &str,
    wait: Duration,
    stop: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    let acquire = slots.clone().acquire_owned();
    tokio::pin!(acquire);
    let mut hold_after = HOLD_AFTER;
    let mut pause = Pause::standard();
    let mut outage = Outage::new();
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return None,
            slot = &mut acquire => return Some(slot.expect("semaphore is never closed")),
            held = async {
                tokio::time::sleep(hold_after).await;
                subscriber.hold(wait).await
            } => {
                hold_after = match held {
                    // A hold returns once `wait` has passed: no spin.
                    Ok(()) => {
                        pause.reset();
                        if let Some(ended) = outage.succeeded() {
                            tracing::info!(%topic, "holding the subscription again {ended}");
                        }
                        Duration::ZERO
                    }
                    Err(err) => {
                        outage.failed();
                        tracing::warn!(%topic, error = %err, "holding the subscription failed; retrying");
                        pause.next_after_failure()
                    }
                };
            }
        }
    }
}

/// Claim the jobs `deliveries` name (one fenced statement), run what was
/// claimed on the `free` slots, then acknowledge every delivery whose job
/// was decided. A database error gives back the deliveries of the jobs it
/// left undecided: all of them when the claim failed outright, only the
/// capped tenants' when their statement failed after the first claimed
/// others (those run).
async fn claim_woken(
    runtime: &JobRuntime,
    subscriber: &mut dyn Subscriber,
    topic: &str,
    served_from_topic: &[String],
    deliveries: &[Delivery],
    free: &mut Vec<tokio::sync::OwnedSemaphorePermit>,
    stats: &WorkerStats,
) -> Result<(), ()> {
    stats.wake_ups.fetch_add(
        deliveries.len() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    let woken: Vec<Option<uuid::Uuid>> = deliveries.iter().map(woken_job).collect();
    let mut job_ids = Vec::with_capacity(deliveries.len());
    for (delivery, woken) in deliveries.iter().zip(&woken) {
        match *woken {
            None => {
                bump(&stats.wake_ups_garbage);
                metrics::record_wake_ups(topic, "garbage", 1);
                tracing::warn!(%topic, message = %delivery.broker_message_id,
                    "delivery names no job; acknowledged and dropped");
            }
            Some(job_id) if job_ids.contains(&job_id) => {
                bump(&stats.wake_ups_duplicate);
                metrics::record_wake_ups(topic, "duplicate", 1);
            }
            Some(job_id) => job_ids.push(job_id),
        }
    }
    let receipts: Vec<_> = deliveries.iter().map(|d| d.receipt.clone()).collect();
    let claimed = match jobwire_core::claim_by_ids(
        runtime.pool(),
        &job_ids,
        served_from_topic,
        runtime.worker_id(),
        runtime.lease(),
    )
    .await
    {
        Ok(claimed) => claimed,
        Err(err) => {
            // Nothing was claimed: give the wake-ups back so they come
            // again (or, where the broker cannot, the reconciler).
            bump(&stats.database_errors);
            tracing::warn!(%topic, error = %err, "claim failed; returning the wake-ups");
            give_back(subscriber, topic, &receipts).await;
            return Err(());
        }
    };
    for (_, miss) in &claimed.missed {
        count_miss(stats, topic, miss);
    }
    metrics::record_wake_ups(topic, "claimed", claimed.claimed.len() as u64);
    metrics::record_claims(&claimed.claimed, ClaimPath::Broker);
    run_on_free_slots(runtime, claimed.claimed, free);
    if claimed.undecided.is_empty() {
        // The claim has committed: the wake-ups have done their work.
        acknowledge(subscriber, topic, &receipts).await;
        return Ok(());
    }
    // The capped tenants' statement failed (and logged why): their jobs'
    // wake-ups go back, the rest have done their work. The caller pauses
    // as after any failed claim.
    let (mut undecided, mut decided) = (Vec::new(), Vec::new());
    for (receipt, woken) in receipts.into_iter().zip(&woken) {
        if woken.is_some_and(|id| claimed.undecided.contains(&id)) {
            undecided.push(receipt);
        } else {
            decided.push(receipt);
        }
    }
    acknowledge(subscriber, topic, &decided).await;
    bump(&stats.database_errors);
    give_back(subscriber, topic, &undecided).await;
    Err(())
}

async fn acknowledge(subscriber: &mut dyn Subscriber, topic: &str, receipts: &[Receipt]) {
    if let Err(err) = subscriber.ack(receipts).await {
        tracing::warn!(%topic, error = %err, "ack failed; the wake-ups will come again and find their jobs held");
    }
}

/// Return deliveries to the broker, to be delivered again.
async fn give_back(subscriber: &mut dyn Subscriber, topic: &str, receipts: &[Receipt]) {
    if let Err(err) = subscriber.nack(receipts, true).await {
        tracing::warn!(%topic, error = %err, "nack failed");
    }
}

/// Run claimed jobs, each on one of the `free` slots it was claimed for
/// (every claim asks for at most `free.len()` jobs).
fn run_on_free_slots(
    runtime: &JobRuntime,
    jobs: Vec<jobwire_core::ClaimedJob>,
    free: &mut Vec<tokio::sync::OwnedSemaphorePermit>,
) {
    for job in jobs {
        let slot = free.pop().expect("never more claims than free slots");
        runtime.spawn(job, Some(slot));
    }
}

/// The broker path's safety net: liveness must not depend on a broker
/// delivering every wake-up. Every `interval`, a worker of a
/// broker-dispatched queue claims straight from the table (SKIP LOCKED, as
/// the PostgreSQL path does) due jobs of that queue that have waited longer
/// than `after` since they became due, on the slots it has free. A broker
/// that loses, delays or mis-routes wake-ups then costs latency, never
/// progress. Pause is respected (the claim statement checks it).
pub(crate) struct SafetyNet {
    /// How long past `run_after` a job must wait before the net takes it.
    pub(crate) after: Duration,
    /// How often to look.
    pub(crate) interval: Duration,
    next_check: tokio::time::Instant,
    /// Whether the last check found jobs: logs say so once per episode,
    /// not once per job.
    in_episode: bool,
    /// Checks that failed in a row.
    outage: Outage,
}

impl SafetyNet {
    pub(crate) fn new(after: Duration, interval: Duration) -> Self {
        SafetyNet {
            after,
            interval,
            next_check: tokio::time::Instant::now() + jittered(interval, POLL_SPREAD),
            in_episode: false,
            outage: Outage::new(),
        }
    }

    /// When a check is due and slots are free, claim overdue jobs onto them.
    async fn claim_if_due(
        &mut self,
        runtime: &JobRuntime,
        queue: &str,
        free: &mut Vec<tokio::sync::OwnedSemaphorePermit>,
    ) {
        let now = tokio::time::Instant::now();
        if now < self.next_check || free.is_empty() {
            return;
        }
        self.next_check = now + jittered(self.interval, POLL_SPREAD);
        let stats = runtime.stats();
        let jobs = match jobwire_core::claim_overdue(
            runtime.pool(),
            queue,
            self.after,
            runtime.worker_id(),
            free.len(),
            runtime.lease(),
        )
        .await
        {
            Ok(jobs) => jobs,
            Err(err) => {
                bump(&stats.database_errors);
                self.outage.failed();
                tracing::warn!(%queue, error = %err, "safety-net claim failed");
                return;
            }
        };
        if let Some(ended) = self.outage.succeeded() {
            tracing::info!(%queue, "safety-net claims work again {ended}");
        }
        if jobs.is_empty() {
            if self.in_episode {
                tracing::info!(%queue, "no job waits past the safety-net bound any more");
                self.in_episode = false;
            }
            return;
        }
        if !self.in_episode {
            tracing::warn!(%queue, jobs = jobs.len(), after = ?self.after,
                "jobs waited past the safety-net bound without a wake-up (the broker path lost or delayed them); claiming them from the table until none is left");
            self.in_episode = true;
        }
        stats
            .safety_net_claims
            .fetch_add(jobs.len() as u64, std::sync::atomic::Ordering::Relaxed);
        metrics::record_claims(&jobs, ClaimPath::SafetyNet);
        run_on_free_slots(runtime, jobs, free);
    }
}
