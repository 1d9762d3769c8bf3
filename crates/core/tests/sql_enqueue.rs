//! `jobwire_enqueue`, the SQL function other languages enqueue with: the
//! same rules as the Rust library (one table of cases through both), inside
//! the caller's transaction, with dedup and wake-ups.

use jobwire_core::{Dispatch, Error, NewJob};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

/// A job as both paths take it.
#[derive(Clone)]
struct Input {
    job_type: &'static str,
    payload: Value,
    queue: &'static str,
    priority: i32,
    max_attempts: i32,
    dedup_key: Option<String>,
    traceparent: Option<&'static str>,
    tracestate: Option<String>,
    tenant: Option<String>,
}

/// The W3C specification's example.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn input(job_type: &'static str) -> Input {
    Input {
        job_type,
        payload: json!({}),
        queue: "default",
        priority: 0,
        max_attempts: 25,
        dedup_key: None,
        traceparent: None,
        tracestate: None,
        tenant: None,
    }
}

/// What an enqueue came to: Ok, or the field / error code at fault.
async fn through_rust(pool: &PgPool, input: &Input) -> Result<Uuid, String> {
    let Ok(priority) = i16::try_from(input.priority) else {
        // Rust's type cannot even hold it: the same verdict, by the compiler.
        return Err("priority".into());
    };
    let mut job = NewJob::new(input.job_type, input.payload.clone())
        .with_queue(input.queue)
        .with_priority(priority)
        .with_max_attempts(input.max_attempts);
    if let Some(key) = &input.dedup_key {
        job = job.with_dedup_key(key.clone());
    }
    if let Some(tenant) = &input.tenant {
        job = job.with_tenant(tenant.clone());
    }
    if let Some(traceparent) = input.traceparent {
        job = job.with_trace_context(jobwire_core::TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate: input.tracestate.clone(),
        });
    }
    match jobwire_core::enqueue(pool, &job).await {
        Ok(enqueued) => Ok(enqueued.job_id),
        Err(Error::InvalidJob { field, .. }) => Err(field.to_owned()),
        Err(other) => Err(other.code().to_owned()),
    }
}

async fn through_sql(pool: &PgPool, input: &Input) -> Result<Uuid, String> {
    let result: Result<(Uuid, bool), sqlx::Error> = sqlx::query_as(
        "SELECT job_id, duplicate FROM jobwire_enqueue($1, payload => $2, queue => $3,
                priority => $4, max_attempts => $5, dedup_key => $6,
                traceparent => $7, tracestate => $8, tenant => $9)",
    )
    .bind(input.job_type)
    .bind(&input.payload)
    .bind(input.queue)
    .bind(input.priority)
    .bind(input.max_attempts)
    .bind(&input.dedup_key)
    .bind(input.traceparent)
    .bind(&input.tracestate)
    .bind(&input.tenant)
    .fetch_one(pool)
    .await;
    match result.map_err(Error::from) {
        Ok((job_id, _)) => Ok(job_id),
        Err(Error::InvalidJob { field, .. }) => Err(field.to_owned()),
        Err(other) => Err(other.code().to_owned()),
    }
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_trace_context_is_stored_and_a_tracestate_needs_a_traceparent(pool: PgPool) {
    let (job_id, _): (Uuid, bool) = sqlx::query_as(
        "SELECT * FROM jobwire_enqueue('send_email', traceparent => $1, tracestate => 'v=1')",
    )
    .bind(TRACEPARENT)
    .fetch_one(&pool)
    .await
    .unwrap();
    let stored: (Option<String>, Option<String>) =
        sqlx::query_as("SELECT traceparent, tracestate FROM jobs WHERE job_id = $1")
            .bind(job_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(stored, (Some(TRACEPARENT.into()), Some("v=1".into())));
    let alone = sqlx::query("SELECT * FROM jobwire_enqueue('send_email', tracestate => 'v=1')")
        .execute(&pool)
        .await
        .map_err(Error::from);
    assert!(
        matches!(
            alone,
            Err(Error::InvalidJob {
                field: "tracestate",
                ..
            })
        ),
        "{alone:?}"
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn rust_and_sql_apply_the_same_rules(pool: PgPool) {
    jobwire_core::set_max_payload_bytes(&pool, 64)
        .await
        .unwrap();
    let cases: Vec<(&str, Input, Option<&str>)> = vec![
        ("plain", input("send_email"), None),
        ("empty type", input(""), Some("job_type")),
        ("blank type", input("  \t"), Some("job_type")),
        (
            "long type",
            Input {
                job_type: Box::leak("t".repeat(256).into_boxed_str()),
                ..input("x")
            },
            Some("job_type"),
        ),
        (
            "type at the limit",
            Input {
                job_type: Box::leak("t".repeat(255).into_boxed_str()),
                ..input("x")
            },
            None,
        ),
        (
            "empty queue",
            Input {
                queue: "",
                ..input("a")
            },
            Some("queue"),
        ),
        (
            "blank queue",
            Input {
                queue: " ",
                ..input("a")
            },
            Some("queue"),
        ),
        (
            "no attempts",
            Input {
                max_attempts: 0,
                ..input("a")
            },
            Some("max_attempts"),
        ),
        (
            "negative attempts",
            Input {
                max_attempts: -1,
                ..input("a")
            },
            Some("max_attempts"),
        ),
        (
            "one attempt",
            Input {
                max_attempts: 1,
                ..input("a")
            },
            None,
        ),
        (
            "lowest priority",
            Input {
                priority: -32768,
                ..input("a")
            },
            None,
        ),
        (
            "highest priority",
            Input {
                priority: 32767,
                ..input("a")
            },
            None,
        ),
        (
            "priority over range",
            Input {
                priority: 32768,
                ..input("a")
            },
            Some("priority"),
        ),
        (
            "priority under range",
            Input {
                priority: -32769,
                ..input("a")
            },
            Some("priority"),
        ),
        (
            "empty key",
            Input {
                dedup_key: Some(String::new()),
                ..input("a")
            },
            Some("dedup_key"),
        ),
        (
            "long key",
            Input {
                dedup_key: Some("k".repeat(1025)),
                ..input("a")
            },
            Some("dedup_key"),
        ),
        (
            "blank tenant",
            Input {
                tenant: Some("  ".into()),
                ..input("a")
            },
            Some("tenant"),
        ),
        (
            // Blank is Unicode's White_Space, whatever the database's
            // locale calls space: C.UTF-8's `[[:space:]]` has U+2003 but
            // not U+00A0 (migration 20261207000006).
            "type of no-break spaces",
            input("\u{a0}\u{a0}"),
            Some("job_type"),
        ),
        (
            "queue of an em space and a line separator",
            Input {
                queue: "\u{2003}\u{2028}",
                ..input("a")
            },
            Some("queue"),
        ),
        (
            "tenant of a narrow no-break space and an ideographic space",
            Input {
                tenant: Some("\u{202f}\u{3000}".into()),
                ..input("a")
            },
            Some("tenant"),
        ),
        (
            "long tenant",
            Input {
                tenant: Some("t".repeat(256)),
                ..input("a")
            },
            Some("tenant"),
        ),
        (
            "type with an escape sequence",
            input("send\u{1b}[2J"),
            Some("job_type"),
        ),
        (
            "queue with a newline",
            Input {
                queue: "bulk\nurgent",
                ..input("a")
            },
            Some("queue"),
        ),
        (
            "tenant with a C1 control (next line)",
            Input {
                tenant: Some("acme\u{85}".into()),
                ..input("a")
            },
            Some("tenant"),
        ),
        (
            "tenant with a tab inside",
            Input {
                tenant: Some("acme\tcorp".into()),
                ..input("a")
            },
            Some("tenant"),
        ),
        (
            "names with spaces, accents and a no-break space",
            Input {
                queue: "bulk imports",
                tenant: Some("Café\u{a0}Ünïcode GmbH".into()),
                ..input("résumé parse")
            },
            None,
        ),
        (
            "tenant at the limit",
            Input {
                tenant: Some("t".repeat(255)),
                ..input("c")
            },
            None,
        ),
        (
            "key at the limit",
            Input {
                dedup_key: Some("k".repeat(1024)),
                ..input("b")
            },
            None,
        ),
        (
            "payload at the limit",
            Input {
                payload: json!({"k": "x".repeat(55)}),
                ..input("a")
            },
            None,
        ),
        (
            "payload over the limit",
            Input {
                payload: json!({"k": "x".repeat(56)}),
                ..input("a")
            },
            Some("PAYLOAD_TOO_LARGE"),
        ),
        (
            "a trace context",
            Input {
                traceparent: Some(TRACEPARENT),
                tracestate: Some("vendor=abc".into()),
                ..input("a")
            },
            None,
        ),
        (
            "traceparent in upper case",
            Input {
                traceparent: Some("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"),
                ..input("a")
            },
            Some("traceparent"),
        ),
        (
            "traceparent with a zero trace id",
            Input {
                traceparent: Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
                ..input("a")
            },
            Some("traceparent"),
        ),
        (
            "traceparent with a zero span id",
            Input {
                traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
                ..input("a")
            },
            Some("traceparent"),
        ),
        (
            "traceparent of version ff",
            Input {
                traceparent: Some("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
                ..input("a")
            },
            Some("traceparent"),
        ),
        (
            "traceparent not one",
            Input {
                traceparent: Some("<script>"),
                ..input("a")
            },
            Some("traceparent"),
        ),
        (
            "tracestate over 512 bytes",
            Input {
                traceparent: Some(TRACEPARENT),
                tracestate: Some(format!("v={}", "x".repeat(511))),
                ..input("a")
            },
            Some("tracestate"),
        ),
        (
            "null payload is JSON null",
            Input {
                payload: Value::Null,
                ..input("a")
            },
            None,
        ),
    ];
    for (name, case, expected) in &cases {
        let rust = through_rust(&pool, case).await;
        let sql = through_sql(&pool, case).await;
        match expected {
            None => assert!(
                rust.is_ok() && sql.is_ok(),
                "{name}: rust {rust:?}, sql {sql:?}"
            ),
            Some(field) => {
                assert_eq!(
                    rust.as_ref().err().map(String::as_str),
                    Some(*field),
                    "{name} (Rust)"
                );
                assert_eq!(
                    sql.as_ref().err().map(String::as_str),
                    Some(*field),
                    "{name} (SQL)"
                );
            }
        }
    }
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn sql_enqueue_lives_and_dies_with_the_callers_transaction(pool: PgPool) {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT jobwire_enqueue('send_email', payload => '{\"userId\": 1}')")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0);

    let mut tx = pool.begin().await.unwrap();
    let (job_id, duplicate): (Uuid, bool) =
        sqlx::query_as("SELECT * FROM jobwire_enqueue('send_email', dedup_key => 'welcome:1')")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    tx.commit().await.unwrap();
    assert!(!duplicate);
    assert_eq!(job_id.get_version_num(), 7, "a UUIDv7");
    let job = jobwire_core::job_status(&pool, job_id).await.unwrap();
    // The Rust library's defaults.
    assert_eq!(
        (job.queue.as_str(), job.priority, job.max_attempts),
        ("default", 0, 25)
    );
    assert_eq!(job.payload, json!({}));

    // The same key again, from SQL or from Rust: the existing job.
    let (again, duplicate): (Uuid, bool) =
        sqlx::query_as("SELECT * FROM jobwire_enqueue('send_email', dedup_key => 'welcome:1')")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((again, duplicate), (job_id, true));
    let from_rust = jobwire_core::enqueue(
        &pool,
        &NewJob::new("send_email", json!({})).with_dedup_key("welcome:1"),
    )
    .await
    .unwrap();
    assert_eq!((from_rust.job_id, from_rust.duplicate), (job_id, true));
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(jobs, 1);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn sql_enqueue_wakes_broker_queues_through_the_outbox(pool: PgPool) {
    jobwire_core::set_queue_dispatch(
        &pool,
        "webhooks",
        &Dispatch::Broker {
            topic: "jobwire.webhooks".into(),
        },
    )
    .await
    .unwrap();
    let (job_id, _): (Uuid, bool) = sqlx::query_as(
        "SELECT * FROM jobwire_enqueue('deliver_webhook', queue => 'webhooks', priority => 2,
                run_after => now() + interval '1 minute', max_attempts => 8)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let (topic, key, available_in_s): (String, String, f64) = sqlx::query_as(
        "SELECT topic, message_key, extract(epoch FROM available_at - now())::float8 FROM job_outbox",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (topic.as_str(), key),
        ("jobwire.webhooks", job_id.to_string())
    );
    // Published when the job becomes due, not before.
    assert!(available_in_s > 50.0, "{available_in_s}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn sql_job_ids_are_time_ordered(pool: PgPool) {
    let mut ids: Vec<Uuid> = Vec::new();
    for _ in 0..3 {
        ids.push(
            sqlx::query_scalar("SELECT jobwire_uuidv7()")
                .fetch_one(&pool)
                .await
                .unwrap(),
        );
        // The next id in a later millisecond.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    for id in &ids {
        assert_eq!(id.get_version_num(), 7);
        assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
    }
    let now_ms = chrono::Utc::now().timestamp_millis() as u64;
    let (secs, nanos) = ids[0].get_timestamp().unwrap().to_unix();
    let id_ms = secs * 1000 + u64::from(nanos) / 1_000_000;
    assert!(now_ms.abs_diff(id_ms) < 60_000, "{id_ms} vs {now_ms}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

/// A job is due in the years 1 to 9999, whoever writes it: outside them no
/// client reads it back (chrono, and so sqlx, ends at the year 262142 and
/// overflows on `-infinity`; PostgreSQL takes both infinities), and one
/// such job used to break every page listing it, or the claim loop of the
/// worker that took it. The Rust enqueue and the SQL function say which
/// field; a service's own INSERT meets the schema's checks; nothing is
/// written either way.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_job_is_due_in_the_years_1_to_9999_on_every_path(pool: PgPool) {
    use chrono::{TimeDelta, TimeZone, Utc};
    let last_second = Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap();
    let first_second = Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap();
    let refused = [
        (
            NewJob::new("late", json!({})).with_run_at(last_second + TimeDelta::seconds(1)),
            "run_at",
            "must be from the year 1 on and before the year 10000",
        ),
        (
            NewJob::new("early", json!({})).with_run_at(first_second - TimeDelta::seconds(1)),
            "run_at",
            "must be from the year 1 on and before the year 10000",
        ),
        (
            NewJob::new("late", json!({}))
                .with_delay(TimeDelta::milliseconds(9_000_000_000_000_000)),
            "delay",
            "must make the job due before the year 10000",
        ),
        (
            NewJob::new("late", json!({})).with_delay(TimeDelta::days(3_000_000)),
            "delay",
            "must make the job due before the year 10000",
        ),
    ];
    for (job, field, said) in refused {
        match jobwire_core::enqueue(&pool, &job).await {
            Err(Error::InvalidJob {
                field: named,
                reason,
            }) => {
                assert_eq!(named, field);
                assert_eq!(reason, said);
            }
            other => panic!("{field}: {other:?}"),
        }
    }
    for run_after in [
        "infinity",
        "10000-01-01 00:00:00+00",
        "294276-01-01 00:00:00+00",
        "-infinity",
        "0001-12-31 23:59:59+00 BC",
        "4713-01-01 00:00:00+00 BC",
    ] {
        let err = sqlx::query("SELECT jobwire_enqueue('late', run_after => $1::timestamptz)")
            .bind(run_after)
            .execute(&pool)
            .await
            .expect_err(run_after);
        match Error::from(err) {
            Error::InvalidJob { field, reason } => {
                assert_eq!(field, "run_after", "{run_after}");
                assert!(
                    reason.starts_with("must be in the years 1 to 9999 (UTC), got "),
                    "{run_after}: {reason}"
                );
            }
            other => panic!("{run_after}: {other:?}"),
        }
        // A service's own INSERT meets the schema's checks.
        let err = sqlx::query(
            "INSERT INTO jobs (job_id, job_type, run_after) VALUES (jobwire_uuidv7(), 'late', $1::timestamptz)",
        )
        .bind(run_after)
        .execute(&pool)
        .await
        .expect_err(run_after);
        let db = err.as_database_error().expect("the database's verdict");
        assert_eq!(db.code().as_deref(), Some("23514"), "{run_after}: {db}");
        let expected = if run_after.ends_with("BC") || run_after == "-infinity" {
            "jobs_run_after_from_the_year_1"
        } else {
            "jobs_run_after_before_10000"
        };
        assert_eq!(db.constraint(), Some(expected), "{run_after}");
    }
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0, "nothing written");
    // The last second of the year 9999 is taken, and read back.
    let kept = jobwire_core::enqueue(
        &pool,
        &NewJob::new("late", json!({})).with_run_at(last_second),
    )
    .await
    .unwrap();
    let status = jobwire_core::job_status(&pool, kept.job_id).await.unwrap();
    assert_eq!(status.run_after, last_second);
    // And the first second of the year 1, through SQL.
    let (early,): (Uuid,) =
        sqlx::query_as("SELECT job_id FROM jobwire_enqueue('early', run_after => $1)")
            .bind(first_second)
            .fetch_one(&pool)
            .await
            .unwrap();
    let status = jobwire_core::job_status(&pool, early).await.unwrap();
    assert_eq!(status.run_after, first_second);
}

/// An id already taken, in the hot table or the history, is the caller's
/// mistake, said as one (JW400 naming `new_job_id`), not a primary key
/// violation; nothing is written.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_job_id_already_taken_is_refused_by_name(pool: PgPool) {
    let (taken,): (Uuid,) = sqlx::query_as("SELECT job_id FROM jobwire_enqueue('first')")
        .fetch_one(&pool)
        .await
        .unwrap();
    let archived = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO jobs_history (job_id, job_type, state, finished_at)
         VALUES ($1, 'old', 'SUCCEEDED', now())",
    )
    .bind(archived)
    .execute(&pool)
    .await
    .unwrap();
    for id in [taken, archived] {
        let err = sqlx::query("SELECT jobwire_enqueue('second', new_job_id => $1)")
            .bind(id)
            .execute(&pool)
            .await
            .expect_err("a taken id");
        match Error::from(err) {
            Error::InvalidJob { field, reason } => {
                assert_eq!(field, "new_job_id");
                assert_eq!(reason, format!("{id} is already a job's id"));
            }
            other => panic!("{other:?}"),
        }
    }
    let seconds: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE job_type = 'second'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(seconds, 0);
}

/// A name with a control character is refused with the same words from
/// Rust and from SQL, and nothing is written: a terminal printing the name
/// would obey the sequence.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_name_with_a_control_character_is_refused_in_the_same_words(pool: PgPool) {
    const REASON: &str = "must not hold control characters (a newline, a tab, an escape)";
    let tenant = "acme\u{1b}]0;pwned\u{7}";
    let from_rust = jobwire_core::enqueue(
        &pool,
        &NewJob::new("send_email", json!({})).with_tenant(tenant),
    )
    .await
    .expect_err("a control character");
    let from_sql = sqlx::query("SELECT jobwire_enqueue('send_email', tenant => $1)")
        .bind(tenant)
        .execute(&pool)
        .await
        .expect_err("a control character");
    for err in [from_rust, Error::from(from_sql)] {
        match err {
            Error::InvalidJob { field, reason } => {
                assert_eq!((field, reason.as_str()), ("tenant", REASON));
            }
            other => panic!("{other:?}"),
        }
    }
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0);
}
