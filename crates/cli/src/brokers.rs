//! Command-line settings for the brokers, and building a transport from them.

use std::sync::Arc;

use anyhow::{Result, bail};
use jobwire_core::Dispatch;
use jobwire_transport::Transport;
#[cfg(feature = "kafka")]
use jobwire_transport::kafka::{KafkaConfig, KafkaTransport};
use jobwire_transport::memory::MemoryTransport;
#[cfg(feature = "rabbitmq")]
use jobwire_transport::rabbitmq::{RabbitConfig, RabbitTransport};
#[cfg(feature = "sqs")]
use jobwire_transport::sqs::{SqsConfig, SqsTransport};
use sha2::{Digest, Sha256};

/// How wake-ups travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BrokerKind {
    /// No broker: workers claim straight from the table (SKIP LOCKED + NOTIFY).
    Postgres,
    /// The in-process transport: relay and consumer in one process, nothing
    /// to install (the embedded default of `jobwire run` and `jobwire demo`).
    Memory,
    /// RabbitMQ (AMQP 0.9.1).
    Rabbitmq,
    /// Amazon SQS (or an emulator).
    Sqs,
    /// Apache Kafka (or a Kafka-protocol broker).
    Kafka,
}

impl BrokerKind {
    /// The cargo feature that builds this broker's client.
    #[cfg_attr(
        all(feature = "rabbitmq", feature = "sqs", feature = "kafka"),
        allow(dead_code)
    )]
    fn feature_name(self) -> &'static str {
        match self {
            BrokerKind::Postgres | BrokerKind::Memory => "default",
            BrokerKind::Rabbitmq => "rabbitmq",
            BrokerKind::Sqs => "sqs",
            BrokerKind::Kafka => "kafka",
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
// A binary built without a broker still accepts (and ignores) its settings,
// so scripts and environments work unchanged.
#[cfg_attr(
    not(all(feature = "rabbitmq", feature = "sqs", feature = "kafka")),
    allow(dead_code)
)]
pub(crate) struct BrokerArgs {
    /// How wake-ups travel (default: `postgres` for `worker`, `memory` for
    /// `run` and `demo`; `relay` needs a broker). Given to a worker, it also
    /// declares its queues' path: `postgres` moves a broker-dispatched
    /// queue back to the PostgreSQL path.
    #[arg(long = "transport", value_enum)]
    pub(crate) kind: Option<BrokerKind>,
    /// RabbitMQ URL.
    #[arg(
        long,
        env = "AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub(crate) amqp_url: String,
    /// Publish non-persistent RabbitMQ messages (for topics that carry only
    /// job wake-ups, which the reconciler can re-create).
    #[arg(long)]
    pub(crate) transient: bool,
    /// SQS endpoint (an emulator; leave the default for a local one).
    #[arg(long, env = "SQS_ENDPOINT", default_value = "http://127.0.0.1:4566")]
    pub(crate) sqs_endpoint: String,
    /// SQS region.
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    pub(crate) sqs_region: String,
    /// Use SQS FIFO queues (per-key order, deduplication by outbox id).
    #[arg(long)]
    pub(crate) sqs_fifo: bool,
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    pub(crate) kafka_bootstrap: String,
}

impl BrokerArgs {
    /// The chosen kind, or `default` when none was given.
    pub(crate) fn kind_or(&self, default: BrokerKind) -> BrokerKind {
        self.kind.unwrap_or(default)
    }

    /// The transport for `kind`; `None` for the PostgreSQL path. A broker
    /// this binary was built without is an error that says how to get it.
    pub(crate) async fn transport(&self, kind: BrokerKind) -> Result<Option<Arc<dyn Transport>>> {
        Ok(Some(match kind {
            BrokerKind::Postgres => return Ok(None),
            BrokerKind::Memory => Arc::new(MemoryTransport::default()),
            #[cfg(feature = "rabbitmq")]
            BrokerKind::Rabbitmq => {
                let mut config = RabbitConfig::new(&self.amqp_url);
                config.persistent = !self.transient;
                Arc::new(RabbitTransport::new(config))
            }
            #[cfg(feature = "sqs")]
            BrokerKind::Sqs => {
                let mut config = SqsConfig::local(&self.sqs_endpoint);
                config.region = self.sqs_region.clone();
                config.fifo = self.sqs_fifo;
                // Real AWS credentials come from the default chain when set.
                if std::env::var_os("AWS_ACCESS_KEY_ID").is_some() {
                    config.credentials = None;
                }
                Arc::new(SqsTransport::new(config).await)
            }
            #[cfg(feature = "kafka")]
            BrokerKind::Kafka => Arc::new(KafkaTransport::new(KafkaConfig::new(
                &self.kafka_bootstrap,
            ))?),
            #[allow(unreachable_patterns)]
            other => bail!(
                "this jobwire was built without the {name} transport: rebuild with `cargo build --features {name}` (or the default features)",
                name = other.feature_name()
            ),
        }))
    }

    /// A transport to a broker another process can reach (not the
    /// in-process one, not the PostgreSQL path).
    pub(crate) async fn shared_transport(&self) -> Result<Arc<dyn Transport>> {
        match self.kind {
            None | Some(BrokerKind::Postgres | BrokerKind::Memory) => bail!(
                "this command needs --transport rabbitmq, sqs or kafka: a broker another process can reach (`jobwire run --transport memory` runs everything in one process)"
            ),
            Some(kind) => Ok(self.transport(kind).await?.expect("a broker")),
        }
    }
}

/// The longest topic [`topic_for`] makes: SQS's limit on a queue's name
/// (80, the lowest of the brokers': RabbitMQ takes 255, Kafka 249), less
/// the `.fifo` a FIFO queue's name ends with.
const MAX_TOPIC_LEN: usize = 75;

/// The topic a queue's wake-ups travel on, when the command line makes it
/// broker-dispatched: `jobwire-<queue>`, with any character that some broker
/// refuses in a name (SQS takes only letters, digits, `-` and `_`) as `-`.
/// Every queue gets a topic of its own: a name that needed such a change
/// ends with a digest of the whole name (`emails.eu` and `emails-eu` would
/// otherwise share `jobwire-emails-eu`, and each queue's workers would take
/// and drop the other's wake-ups). So does a name longer than brokers take
/// (a queue name may be 255 bytes): past [`MAX_TOPIC_LEN`], the topic keeps
/// the name's beginning.
pub(crate) fn topic_for(queue: &str) -> String {
    let safe: String = queue
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let topic = format!("jobwire-{safe}");
    if safe == queue && topic.len() <= MAX_TOPIC_LEN {
        return topic;
    }
    let digest = Sha256::digest(queue.as_bytes());
    let hex = hex::encode(&digest[..8]);
    // ASCII only by now, so any byte is a character boundary.
    let keep = topic.len().min(MAX_TOPIC_LEN - hex.len() - 1);
    format!("{}-{hex}", &topic[..keep])
}

/// Say so when a queue whose path a worker is about to declare has no job
/// and was never declared: most often a typo of one that exists. The
/// worker serves it anyway (a new queue is a fine thing to start a worker
/// for), but without a word the typo's worker would idle, and declare the
/// name for good, while the real queue waited. Only a note: a failure to
/// look is logged, and the worker starts.
async fn note_new_queues(pool: &sqlx::PgPool, queues: &[String]) {
    if let Err(err) = look_for_new_queues(pool, queues).await {
        tracing::debug!(error = %err, "could not tell whether the queues are new");
    }
}

/// [`note_new_queues`]. Costs a scan of `jobs` for a queue with no job
/// (only the waiting jobs are indexed by queue), and one more to list the
/// queues when there is such a queue: once, as the worker starts.
async fn look_for_new_queues(pool: &sqlx::PgPool, queues: &[String]) -> Result<()> {
    let mut known: Option<Vec<String>> = None;
    for queue in queues {
        if jobwire_core::queue_is_known(pool, queue).await? {
            continue;
        }
        if known.is_none() {
            let overview = jobwire_core::queue_overview(pool).await?;
            known = Some(overview.into_iter().map(|row| row.queue).collect());
        }
        let similar: Vec<&str> = known
            .iter()
            .flatten()
            .filter(|name| strsim::damerau_levenshtein(name, queue) <= 2)
            .map(String::as_str)
            .collect();
        if similar.is_empty() {
            tracing::info!(%queue, "a new queue: no job is in it and no worker declared it before");
        } else {
            tracing::warn!(%queue, similar = %similar.join(", "),
                "a new queue: no job is in it and no worker declared it before; a typo of a queue that exists?");
        }
    }
    Ok(())
}

/// A worker left on its default path (no `--transport`) serves no queue
/// that is dispatched through a broker: say how to serve it, or how to
/// bring it back (a `jobwire run`, whose in-process transport is the
/// default, leaves its queues broker-dispatched when it ends).
pub(crate) async fn refuse_broker_queues(pool: &sqlx::PgPool, queues: &[String]) -> Result<()> {
    for queue in queues {
        if let Dispatch::Broker { topic } = jobwire_core::queue_dispatch(pool, queue).await? {
            bail!(
                "queue {queue} is dispatched through a broker (topic {topic}): start the worker with \
                 that broker's --transport (rabbitmq, sqs or kafka), or with --transport postgres to \
                 move the queue back to the PostgreSQL path (a `jobwire run` leaves its queues on its \
                 in-process transport, which only it serves: use --transport postgres then)"
            );
        }
    }
    Ok(())
}

/// Make every queue in `queues` dispatched as `kind` says: through the broker
/// on [`topic_for`] (unless it already has a broker topic), or the
/// PostgreSQL path. Logged, because it changes where new wake-ups go.
///
/// A queue is moved to a broker only once `transport` has reached it: a
/// mistyped broker address or password would otherwise move a live queue
/// onto a path nothing consumes. A queue already on that broker is served
/// as before, the worker retrying until the broker answers.
pub(crate) async fn declare_dispatch(
    pool: &sqlx::PgPool,
    kind: BrokerKind,
    transport: Option<&dyn Transport>,
    queues: &[String],
) -> Result<()> {
    note_new_queues(pool, queues).await;
    let mut broker_reached = false;
    let mut topics = Vec::new();
    for queue in queues {
        let current = jobwire_core::queue_dispatch(pool, queue).await?;
        let wanted = match (kind, &current) {
            (BrokerKind::Postgres, _) => Dispatch::Postgres,
            (_, Dispatch::Broker { .. }) => current.clone(),
            _ => Dispatch::Broker {
                topic: topic_for(queue),
            },
        };
        let changed = wanted != current;
        let to_postgres = wanted == Dispatch::Postgres;
        if changed
            && !to_postgres
            && !broker_reached
            && let Some(transport) = transport
        {
            transport.check().await.map_err(|err| {
                anyhow::anyhow!(
                    "cannot reach the broker ({name} at {address}): {err}; queue {queue} stays where it is ({current}). \
                     Check the broker's address and credentials, or start it, then start the worker again",
                    name = transport.name(),
                    address = transport.address()
                )
            })?;
            broker_reached = true;
        }
        if changed && to_postgres {
            // Warned: a worker started with `--transport postgres` by habit
            // takes the queue away from its broker workers.
            tracing::warn!(%queue, was = %current, now = %wanted, "queue dispatch changed");
        } else if changed {
            tracing::info!(%queue, was = %current, now = %wanted, "queue dispatch changed");
        }
        // Declared again even when unchanged on the PostgreSQL path: that
        // gives back any tenant slot still handed to a waiting job (see
        // `set_queue_dispatch`).
        if changed || to_postgres {
            jobwire_core::set_queue_dispatch(pool, queue, &wanted).await?;
        }
        if let Dispatch::Broker { topic } = wanted {
            topics.push(topic);
        }
    }
    warn_of_shared_topics(pool, &topics, queues).await;
    Ok(())
}

/// Say so when another queue's wake-ups travel on a topic this worker
/// consumes: the worker takes them off the topic, cannot claim them (it
/// does not serve that queue) and acknowledges them, so that queue's jobs
/// wait for the reconciler. Only a warning: a failure to look is logged.
async fn warn_of_shared_topics(pool: &sqlx::PgPool, topics: &[String], served: &[String]) {
    if topics.is_empty() {
        return;
    }
    match jobwire_core::queues_sharing_topics(pool, topics, served).await {
        Ok(shared) => {
            for (queue, topic) in shared {
                tracing::warn!(%queue, %topic,
                    "another queue's wake-ups travel on a topic this worker consumes: it drops them, and \
                     that queue's jobs wait for the reconciler; serve both queues with the same workers, \
                     or give that queue a topic of its own");
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, "could not look for queues sharing this worker's topics")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_fits_every_broker() {
        assert_eq!(topic_for("bulk"), "jobwire-bulk");
        assert_eq!(topic_for("bulk-imports_eu"), "jobwire-bulk-imports_eu");
        // A name with characters a broker refuses: its own topic, by digest.
        let changed = topic_for("bulk imports.é");
        assert!(changed.starts_with("jobwire-bulk-imports---"), "{changed}");
        jobwire_transport::validate_topic(&changed, 80).unwrap();
        assert_ne!(topic_for("emails.eu"), topic_for("emails-eu"));
        assert_ne!(topic_for("emails.eu"), topic_for("emails:eu"));
        assert_eq!(topic_for("emails.eu"), topic_for("emails.eu"));
        let long = "q".repeat(250);
        let topic = topic_for(&long);
        assert_eq!(topic.len(), MAX_TOPIC_LEN, "{topic}");
        assert!(topic.starts_with("jobwire-qqq"), "{topic}");
        // Every broker's rule: letters, digits, '-' and '_', and room for
        // an SQS FIFO queue's `.fifo` within SQS's 80.
        jobwire_transport::validate_topic(&format!("{topic}.fifo"), 80).unwrap();
        // Two long names with one beginning get topics of their own; one
        // name gets the same topic every time.
        let other = format!("{}r", "q".repeat(249));
        assert_ne!(topic_for(&other), topic);
        assert_eq!(topic_for(&long), topic);
        // The longest name that needs no digest keeps its plain topic.
        let fits = "q".repeat(MAX_TOPIC_LEN - "jobwire-".len());
        assert_eq!(topic_for(&fits), format!("jobwire-{fits}"));
    }
}
