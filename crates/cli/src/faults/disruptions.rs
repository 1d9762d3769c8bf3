//! The faults besides SIGKILL: service restarts, a pause and resume of every
//! queue, and garbage on every wake-up channel.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use jobwire_transport::{Envelope, Headers, header};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use super::FaultPath;
use crate::brokers::{BrokerArgs, BrokerKind};

/// Stop a service and start it again with `<script> restart <service>`
/// (`scripts/services`, which knows how each one runs on this machine).
pub(crate) async fn restart_service(script: &Path, service: &str) -> Result<()> {
    let output = tokio::process::Command::new(script)
        .args(["restart", service])
        // A group of its own: Ctrl-C at the terminal stops `jobwire faults`,
        // not a restart half done (a service left stopped).
        .process_group(0)
        .output()
        .await
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        bail!(
            "`{} restart {service}` failed ({}): {}",
            script.display(),
            output.status,
            stderr.trim()
        );
    }
    Ok(())
}

/// Pause every queue, hold, resume, and record the window in `fault_pauses`
/// as the database's clock tells it. The window starts after the pauses
/// committed and ends before the resumes do, so it is strict: a claim whose
/// transaction started inside it is a claim of a paused queue.
pub(crate) async fn pause_and_resume(
    pool: &PgPool,
    queues: &[String],
    hold: Duration,
) -> Result<()> {
    let paused = pause_for(pool, queues, hold).await;
    // Resumed whatever happened above: a queue left paused would hold the
    // run until its drain timeout and hide the real failure.
    let mut resumed = Ok(());
    for _ in 0..10 {
        resumed = resume(pool, queues).await;
        if resumed.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (from, to) = paused?;
    resumed?;
    sqlx::query(
        "INSERT INTO fault_pauses (queue, from_at, to_at) SELECT unnest($1::text[]), $2, $3",
    )
    .bind(queues)
    .bind(from)
    .bind(to)
    .execute(pool)
    .await?;
    Ok(())
}

async fn pause_for(
    pool: &PgPool,
    queues: &[String],
    hold: Duration,
) -> Result<(DateTime<Utc>, DateTime<Utc>)> {
    for queue in queues {
        jobwire_core::set_queue_paused(pool, queue, true).await?;
    }
    let from: DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(pool).await?;
    tokio::time::sleep(hold).await;
    let to: DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(pool).await?;
    Ok((from, to))
}

async fn resume(pool: &PgPool, queues: &[String]) -> Result<()> {
    for queue in queues {
        jobwire_core::set_queue_paused(pool, queue, false).await?;
    }
    Ok(())
}

/// The server's start time: a restart that did not restart the server
/// `DATABASE_URL` names (another cluster, a server in a container) must
/// not pass for one.
pub(crate) async fn postgres_started_at(pool: &PgPool) -> Result<DateTime<Utc>> {
    Ok(sqlx::query_scalar("SELECT pg_postmaster_start_time()")
        .fetch_one(pool)
        .await?)
}

/// Send garbage down every path's wake-up channel: for broker paths, outbox
/// rows a relay publishes like any other (bodies that are not wake-ups,
/// unknown and malformed job ids, a wake-up for another queue's job) plus
/// raw non-JSON messages published straight to the broker; for
/// the PostgreSQL path, notifications naming no queue or an unknown one.
/// Returns how many garbage messages were sent.
pub(crate) async fn send_garbage(
    pool: &PgPool,
    paths: &[FaultPath],
    brokers: &BrokerArgs,
    run: &str,
) -> Result<usize> {
    let mut sent = 0;
    for path in paths {
        let Some(kind) = path.broker() else {
            for queue in ["", "no-such-queue", "faults_\u{1F4A5}"] {
                sqlx::query("SELECT pg_notify('jobwire_jobs', $1)")
                    .bind(queue)
                    .execute(pool)
                    .await?;
                sent += 1;
            }
            continue;
        };
        let queue = path.queue();
        let topic = path.topic(run);
        let stranger: Option<Uuid> =
            sqlx::query_scalar("SELECT job_id FROM jobs WHERE queue <> $1 LIMIT 1")
                .bind(&queue)
                .fetch_optional(pool)
                .await?;
        let unknown = Uuid::new_v4();
        let mut rows: Vec<(Value, Value)> = vec![
            (json!({"hello": "world"}), json!({})),
            (
                json!({"job_id": "not-a-uuid"}),
                json!({"jobwire-kind": "wake-up", "jobwire-job-id": "not-a-uuid"}),
            ),
            (
                json!({"job_id": unknown, "generation": 1}),
                json!({"jobwire-kind": "wake-up", "jobwire-job-id": unknown.to_string()}),
            ),
            (json!([1, 2, 3]), json!({})),
            (json!("just text"), json!({})),
        ];
        if let Some(job_id) = stranger {
            rows.push((
                json!({"job_id": job_id, "generation": 0}),
                json!({"jobwire-kind": "wake-up", "jobwire-job-id": job_id.to_string()}),
            ));
        }
        for (payload, headers) in &rows {
            sqlx::query("INSERT INTO job_outbox (topic, payload, headers) VALUES ($1, $2, $3)")
                .bind(&topic)
                .bind(payload)
                .bind(headers)
                .execute(pool)
                .await?;
        }
        sent += rows.len();

        let transport = brokers
            .transport(kind)
            .await?
            .context("a broker path has a transport")?;
        // Text that is not JSON on every broker; bytes that are not even
        // UTF-8 where the broker carries them (SQS bodies must be text).
        let mut bodies: Vec<&[u8]> = vec![b"not json at all {"];
        if kind != BrokerKind::Sqs {
            bodies.push(b"\xff\xfe not utf-8 \x00");
        }
        let raw: Vec<Envelope> = bodies
            .iter()
            .map(|body| Envelope {
                outbox_id: 0,
                topic: topic.clone(),
                key: None,
                payload: body.to_vec(),
                headers: Headers::from([(header::KIND.to_owned(), "wake-up".to_owned())]),
            })
            .collect();
        let published = transport.publish(&raw).await;
        let _ = transport.close().await;
        for result in published {
            result.map_err(|err| anyhow::anyhow!("publishing raw garbage to {topic}: {err}"))?;
        }
        sent += raw.len();
    }
    Ok(sent)
}
