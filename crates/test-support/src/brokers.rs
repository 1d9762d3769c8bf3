//! Broker addresses for tests, from the environment, defaulting to the local
//! services `scripts/services` starts.

/// RabbitMQ URL (`AMQP_URL`).
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// SQS endpoint (`SQS_ENDPOINT`).
pub fn sqs_endpoint() -> String {
    std::env::var("SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
}

/// Kafka bootstrap servers (`KAFKA_BOOTSTRAP`).
pub fn kafka_bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// A loopback port nothing listens on right now (a process the test starts
/// binds it a moment later).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}
