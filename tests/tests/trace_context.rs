//! Trace context from the enqueue to every attempt, on each path: a job
//! enqueued inside a traced span records it; the worker's span for each
//! attempt links to that span (a link, not a parent), the retry's too. The
//! spans are caught by OpenTelemetry's in-memory exporter; the jobs run
//! through the real brokers.

use std::sync::Arc;
use std::time::Duration;

use jobwire_consumer::{HandlerRegistry, QueueConfig, RuntimeConfig, Worker, WorkerConfig};
use jobwire_core::{Dispatch, JobState, NewJob};
use jobwire_relay::{Relay, RelayConfig};
use jobwire_server::Node;
use jobwire_test_support::{brokers, fast_options, wait_for_state};
use jobwire_transport::kafka::{KafkaConfig, KafkaTransport};
use jobwire_transport::memory::MemoryTransport;
use jobwire_transport::rabbitmq::{RabbitConfig, RabbitTransport};
use jobwire_transport::sqs::{SqsConfig, SqsTransport};
use jobwire_transport::{SubscribeOptions, Transport};
use opentelemetry::trace::{TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::json;
use sqlx::PgPool;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use uuid::Uuid;

/// The path a job takes.
#[derive(Clone, Copy, Debug)]
enum Path {
    Postgres,
    Memory,
    Rabbitmq,
    Sqs,
    Kafka,
}

impl Path {
    async fn transport(self) -> Option<Arc<dyn Transport>> {
        Some(match self {
            Path::Postgres => return None,
            Path::Memory => Arc::new(MemoryTransport::default()),
            Path::Rabbitmq => {
                Arc::new(RabbitTransport::new(RabbitConfig::new(brokers::amqp_url())))
            }
            Path::Sqs => {
                Arc::new(SqsTransport::new(SqsConfig::local(brokers::sqs_endpoint())).await)
            }
            Path::Kafka => {
                let mut config = KafkaConfig::new(brokers::kafka_bootstrap());
                config.timeout = Duration::from_secs(15);
                Arc::new(KafkaTransport::new(config).unwrap())
            }
        })
    }
}

/// Enqueue a job that fails its first attempt inside a traced span, run it
/// through `path`, and check that both attempt spans link to that span.
async fn attempts_link_to_the_enqueuing_span(pool: PgPool, path: Path) {
    // Spans of this test only: a subscriber for this thread (the runtime is
    // single-threaded, so every task the node spawns runs here).
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("jobwire-test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let queue = format!("trace-{}", &Uuid::new_v4().simple().to_string()[..12]);
    let transport = path.transport().await;
    if transport.is_some() {
        let topic = format!("wake-{queue}");
        jobwire_core::set_queue_dispatch(&pool, &queue, &Dispatch::Broker { topic })
            .await
            .unwrap();
    }
    let mut registry = HandlerRegistry::new();
    jobwire_consumer::builtin::register_builtin_handlers(&mut registry, fast_options());
    let config = WorkerConfig {
        runtime: RuntimeConfig {
            lease: Duration::from_secs(3),
            ..RuntimeConfig::default()
        },
        queues: vec![QueueConfig::new(&queue, 2)],
        poll_interval: Duration::from_millis(100),
        receive_wait: Duration::from_millis(300),
        subscribe: SubscribeOptions {
            group: format!("group-{queue}"),
            ..SubscribeOptions::default()
        },
        shutdown_timeout: Duration::from_secs(5),
        ..WorkerConfig::default()
    };
    let mut worker = Worker::new(pool.clone(), registry, config);
    let mut node = Node::new(pool.clone());
    if let Some(transport) = &transport {
        worker = worker.with_transport(transport.clone());
        let relay_config = RelayConfig {
            poll_interval: Duration::from_millis(100),
            ..RelayConfig::default()
        };
        node = node
            .with_relay(Relay::new(pool.clone(), transport.clone(), relay_config))
            .closing(transport.clone());
    }
    let mut running = node.with_worker(worker).start().unwrap();

    // The request a service handles: the job is enqueued inside its span.
    let request = tracing::info_span!("handle_request");
    let trace_id: TraceId = request.context().span().span_context().trace_id();
    let request_span_id = request.context().span().span_context().span_id();
    assert_ne!(
        trace_id,
        TraceId::INVALID,
        "the test's tracer samples every span"
    );
    let job = NewJob::new("fail_times", json!({"times": 1})).with_queue(&queue);
    let job_id = async { jobwire_core::enqueue(&pool, &job).await.unwrap().job_id }
        .instrument(request.clone())
        .await;
    drop(request);
    let stored: Option<String> =
        sqlx::query_scalar("SELECT traceparent FROM jobs WHERE job_id = $1")
            .bind(job_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    let stored = stored.expect("the enqueue recorded the trace context");
    assert!(
        stored.contains(&trace_id.to_string()),
        "{stored} names trace {trace_id}"
    );

    let done = wait_for_state(&pool, job_id, JobState::Succeeded, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(
        done.attempt_count, 2,
        "{path:?}: the first attempt failed, the retry ran"
    );
    running.stop().await.unwrap();
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let attempts: Vec<_> = spans.iter().filter(|span| span.name == "job").collect();
    assert_eq!(
        attempts.len(),
        2,
        "{path:?}: one span per attempt: {spans:#?}"
    );
    for attempt in &attempts {
        assert_ne!(
            attempt.span_context.trace_id(),
            trace_id,
            "{path:?}: an attempt is linked to the enqueue, not its child"
        );
        assert!(
            attempt
                .links
                .iter()
                .any(|link| link.span_context.trace_id() == trace_id
                    && link.span_context.span_id() == request_span_id),
            "{path:?}: attempt span not linked to the enqueuing trace: {attempt:#?}"
        );
        let job_attribute = attempt
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "job_id")
            .map(|kv| kv.value.to_string());
        assert_eq!(job_attribute, Some(job_id.to_string()), "{path:?}");
    }
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn postgres_path_attempts_link_to_the_enqueue(pool: PgPool) {
    attempts_link_to_the_enqueuing_span(pool, Path::Postgres).await;
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn memory_transport_attempts_link_to_the_enqueue(pool: PgPool) {
    attempts_link_to_the_enqueuing_span(pool, Path::Memory).await;
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn rabbitmq_attempts_link_to_the_enqueue(pool: PgPool) {
    attempts_link_to_the_enqueuing_span(pool, Path::Rabbitmq).await;
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn sqs_attempts_link_to_the_enqueue(pool: PgPool) {
    attempts_link_to_the_enqueuing_span(pool, Path::Sqs).await;
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn kafka_attempts_link_to_the_enqueue(pool: PgPool) {
    attempts_link_to_the_enqueuing_span(pool, Path::Kafka).await;
}

/// Tracing never makes an enqueue fail: an upstream tracestate longer than
/// the table keeps is dropped, the traceparent recorded.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_long_upstream_tracestate_is_dropped_not_the_enqueue(pool: PgPool) {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceState};
    let provider = SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("jobwire-test")));
    let _guard = tracing::subscriber::set_default(subscriber);
    // Values are at most 256 characters each: three vendors, 600+ bytes.
    let value = "x".repeat(200);
    let long_state = TraceState::from_key_value([
        ("a", value.as_str()),
        ("b", value.as_str()),
        ("c", value.as_str()),
    ])
    .unwrap();
    let upstream = SpanContext::new(
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
        SpanId::from_hex("00f067aa0ba902b7").unwrap(),
        TraceFlags::SAMPLED,
        true,
        long_state,
    );
    let request = tracing::info_span!("handle_request");
    let _ = request.set_parent(opentelemetry::Context::new().with_remote_span_context(upstream));
    let job = jobwire_core::enqueue(&pool, &NewJob::new("noop", json!({})))
        .instrument(request)
        .await
        .expect("the enqueue succeeds whatever the tracestate");
    let stored: (Option<String>, Option<String>) =
        sqlx::query_as("SELECT traceparent, tracestate FROM jobs WHERE job_id = $1")
            .bind(job.job_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        stored
            .0
            .as_deref()
            .is_some_and(|p| p.contains("4bf92f3577b34da6a3ce929d0e0e4736")),
        "{stored:?}"
    );
    assert_eq!(stored.1, None, "the oversized tracestate is dropped");
}

/// Without an OpenTelemetry layer nothing is recorded: no trace context,
/// and the job runs as before.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn an_untraced_enqueue_records_no_trace_context(pool: PgPool) {
    let job = jobwire_core::enqueue(&pool, &NewJob::new("noop", json!({})))
        .instrument(tracing::info_span!("no layer, no trace"))
        .await
        .unwrap();
    let stored: Option<String> =
        sqlx::query_scalar("SELECT traceparent FROM jobs WHERE job_id = $1")
            .bind(job.job_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(stored, None);
}
