//! Command-line settings for the brokers, and building a transport from them.

use std::sync::Arc;

use anyhow::Result;
use jobwire_transport::Transport;
use jobwire_transport::kafka::{KafkaConfig, KafkaTransport};
use jobwire_transport::rabbitmq::{RabbitConfig, RabbitTransport};
use jobwire_transport::sqs::{SqsConfig, SqsTransport};

/// Which broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BrokerKind {
    /// RabbitMQ (AMQP 0.9.1).
    Rabbitmq,
    /// Amazon SQS (or an emulator).
    Sqs,
    /// Apache Kafka (or a Kafka-protocol broker).
    Kafka,
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BrokerArgs {
    /// The broker to use.
    #[arg(long = "transport", value_enum)]
    pub(crate) kind: BrokerKind,
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
    pub(crate) async fn transport(&self) -> Result<Arc<dyn Transport>> {
        Ok(match self.kind {
            BrokerKind::Rabbitmq => {
                let mut config = RabbitConfig::new(&self.amqp_url);
                config.persistent = !self.transient;
                Arc::new(RabbitTransport::new(config))
            }
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
            BrokerKind::Kafka => Arc::new(KafkaTransport::new(KafkaConfig::new(
                &self.kafka_bootstrap,
            ))?),
        })
    }
}
