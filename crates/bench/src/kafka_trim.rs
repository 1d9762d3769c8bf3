//! Kafka topics trimmed as a run goes: the records below what the run's
//! consumer group has committed are deleted (Kafka's `DeleteRecords`).
//!
//! Why: the Kafka-protocol broker the test services run (nisshi, with its
//! in-memory storage) lists every batch a partition has ever stored on
//! each fetch that finds new data, and enforces no retention. So a
//! consumer's deliveries slow down as its topic grows: through a
//! 100,000-job run the delivery leg grew from 5 to 17 ms at the median
//! while the broker went from 12 % to 81 % of a core (docs/benchmarks.md,
//! "A broker queue's slot hand-over, stage by stage"). Apache Kafka serves
//! a fetch from an offset index, whatever the log's length. Deleting what
//! the group has already committed keeps the test broker's log short, so
//! that a Kafka figure measures jobwire rather than the broker's log.
//!
//! Nothing else reads what is deleted: every run has a topic and a
//! consumer group of its own, and a committed offset is one below which
//! every wake-up has been acknowledged (after its claim) by the group.
//! `jobwire bench --kafka-trim-ms 0` turns it off.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{Offset, TopicPartitionList};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// How long one broker request of a trim may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The records of some topics that their consumer groups have committed.
pub struct CommittedRecords {
    admin: AdminClient<DefaultClientContext>,
    topics: Vec<GroupOnTopic>,
    /// Per topic and partition: the offset below which records are deleted
    /// already (nothing is asked again for less).
    deleted_below: HashMap<(String, i32), i64>,
}

/// One topic and a client of the group that reads it. The client never
/// joins the group (it subscribes to nothing), so the group does not
/// rebalance for it: it only reads the group's committed offsets.
struct GroupOnTopic {
    topic: String,
    group: Arc<BaseConsumer>,
    /// Read from the topic's metadata on the first trim.
    partitions: Vec<i32>,
}

impl CommittedRecords {
    /// The records of `topics` on the brokers at `bootstrap`, each topic
    /// read by the consumer group of [`jobwire_transport::kafka::group_for_topic`]
    /// for `group` (as a worker subscribed with that group reads it).
    pub fn new(bootstrap: &str, group: &str, topics: &[String]) -> Result<Self> {
        let admin = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .context("kafka admin client")?;
        let topics = topics
            .iter()
            .map(|topic| {
                let group = jobwire_transport::kafka::group_for_topic(group, topic);
                let client: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", bootstrap)
                    .set("group.id", &group)
                    .set("enable.auto.commit", "false")
                    .create()
                    .with_context(|| format!("kafka client of group {group}"))?;
                Ok(GroupOnTopic {
                    topic: topic.clone(),
                    group: Arc::new(client),
                    partitions: Vec::new(),
                })
            })
            .collect::<Result<_>>()?;
        Ok(CommittedRecords {
            admin,
            topics,
            deleted_below: HashMap::new(),
        })
    }

    /// Delete every partition's records below the offset its group has
    /// committed. Returns how many partitions were trimmed further.
    pub async fn delete(&mut self) -> Result<usize> {
        let mut cut = TopicPartitionList::new();
        for topic in &mut self.topics {
            if topic.partitions.is_empty() {
                topic.partitions = partitions(&topic.group, &topic.topic).await?;
            }
            for (partition, committed) in committed(topic).await? {
                let below = self
                    .deleted_below
                    .get(&(topic.topic.clone(), partition))
                    .copied()
                    .unwrap_or(0);
                if committed > below {
                    cut.add_partition_offset(&topic.topic, partition, Offset::Offset(committed))?;
                }
            }
        }
        if cut.count() == 0 {
            return Ok(0);
        }
        let options = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
        let results = self.admin.delete_records(&cut, &options).await?;
        let mut trimmed = 0;
        for element in results.elements() {
            if let Err(err) = element.error() {
                bail!(
                    "delete records of {} [{}]: {err}",
                    element.topic(),
                    element.partition()
                );
            }
            if let Some(Offset::Offset(asked)) = cut
                .find_partition(element.topic(), element.partition())
                .map(|asked| asked.offset())
            {
                self.deleted_below
                    .insert((element.topic().to_owned(), element.partition()), asked);
                trimmed += 1;
            }
        }
        Ok(trimmed)
    }
}

/// The partitions of `topic`, from the broker's metadata.
async fn partitions(client: &Arc<BaseConsumer>, topic: &str) -> Result<Vec<i32>> {
    let client = client.clone();
    let topic = topic.to_owned();
    // librdkafka's calls block: off the runtime's threads.
    tokio::task::spawn_blocking(move || {
        let metadata = client.fetch_metadata(Some(&topic), REQUEST_TIMEOUT)?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|found| found.name() == topic)
            .flat_map(|found| found.partitions().iter().map(|p| p.id()))
            .collect();
        if partitions.is_empty() {
            bail!("kafka topic {topic} has no partitions (yet)");
        }
        Ok(partitions)
    })
    .await?
}

/// Each partition's committed offset, for the partitions with one.
async fn committed(topic: &GroupOnTopic) -> Result<Vec<(i32, i64)>> {
    let client = topic.group.clone();
    let mut asked = TopicPartitionList::new();
    for partition in &topic.partitions {
        asked.add_partition(&topic.topic, *partition);
    }
    tokio::task::spawn_blocking(move || {
        let offsets = client.committed_offsets(asked, REQUEST_TIMEOUT)?;
        Ok(offsets
            .elements()
            .iter()
            .filter_map(|element| match element.offset() {
                Offset::Offset(offset) => Some((element.partition(), offset)),
                _ => None,
            })
            .collect())
    })
    .await?
}

/// A trim every so often beside a bench run, until stopped.
pub(crate) struct Trimming {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Trimming {
    /// Trim the topics of `queues` (read by `group`) every `every`.
    pub(crate) fn start(
        pool: PgPool,
        bootstrap: String,
        group: String,
        queues: Vec<String>,
        every: Duration,
    ) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let topics: Vec<String> = match sqlx::query_scalar(
                    "SELECT DISTINCT topic FROM job_queues
                     WHERE queue = ANY($1) AND dispatch = 'broker' AND topic IS NOT NULL",
                )
                .bind(&queues)
                .fetch_all(&pool)
                .await
                {
                    Ok(topics) => topics,
                    Err(err) => {
                        tracing::warn!(error = %err, "kafka trim: cannot read the run's topics");
                        return;
                    }
                };
                let mut records = match CommittedRecords::new(&bootstrap, &group, &topics) {
                    Ok(records) => records,
                    Err(err) => {
                        tracing::warn!(error = %err, "kafka trim: cannot connect");
                        return;
                    }
                };
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(every) => {}
                    }
                    // A failed trim leaves the log longer, nothing else: the
                    // next one tries again.
                    if let Err(err) = records.delete().await {
                        tracing::debug!(error = %err, "kafka trim failed");
                    }
                }
            }
        });
        Trimming { stop, task }
    }

    /// Stop trimming.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
