//! Kafka passes the conformance suite against a real Kafka-protocol broker
//! (`KAFKA_BOOTSTRAP`, default `127.0.0.1:9092`; `docker compose up kafka`
//! gives a real Apache Kafka there).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jobwire_transport::Transport;
use jobwire_transport::conformance::ConformanceTarget;
use jobwire_transport::kafka::{KafkaConfig, KafkaTransport};

struct KafkaTarget;

fn bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

#[async_trait]
impl ConformanceTarget for KafkaTarget {
    async fn transport(&self) -> Arc<dyn Transport> {
        let mut config = KafkaConfig::new(bootstrap());
        config.timeout = Duration::from_secs(15);
        Arc::new(KafkaTransport::new(config).expect("kafka transport"))
    }

    async fn unreachable(&self) -> Arc<dyn Transport> {
        let mut config = KafkaConfig::new("127.0.0.1:1");
        config.timeout = Duration::from_secs(5);
        Arc::new(KafkaTransport::new(config).expect("kafka transport"))
    }

    fn topic(&self, scenario: &str) -> String {
        format!("conformance.{scenario}.{}", uuid::Uuid::new_v4().simple())
    }
}

jobwire_transport::conformance_tests!(KafkaTarget);
