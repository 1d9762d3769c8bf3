//! The HTTP API over real sockets against a real PostgreSQL: every status
//! code the API promises, concurrent idempotent enqueues, and tokens.

mod common;

use common::{Api, error_code, parts};
use jobwire_core::{JobState, NewJob, Scope};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

async fn enqueue(api: &Api, body: Value) -> (u16, Value) {
    parts(
        api.post("/jobs", &api.write)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// Jobs of `job_type` in the table.
async fn rows_of_type(api: &Api, job_type: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE job_type = $1")
        .bind(job_type)
        .fetch_one(&api.pool)
        .await
        .unwrap()
}

fn job_id(body: &Value) -> Uuid {
    body["jobId"].as_str().unwrap().parse().unwrap()
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn enqueue_read_and_list_jobs(pool: PgPool) {
    let api = Api::start(pool).await;
    let body = json!({
        "type": "generate_invoice_pdf", "payload": {"invoiceId": "inv_7731"},
        "runAt": "2026-11-01T00:05:00+05:30", "priority": 1, "queue": "default",
        "maxAttempts": 8, "idempotencyKey": "invoice-pdf:inv_7731"
    });
    let response = api
        .post("/jobs", &api.write)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let request_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(request_id.starts_with("req_"), "{request_id}");
    let created: Value = response.json().await.unwrap();
    let id = job_id(&created);
    assert_eq!(location, format!("/jobs/{id}"));
    assert_eq!(created["state"], "QUEUED");
    assert_eq!(created["duplicate"], false);
    assert_eq!(created["type"], "generate_invoice_pdf");
    assert_eq!(created["maxAttempts"], 8);
    assert_eq!(created["priority"], 1);
    // The offset is honoured: 00:05 at +05:30 is 18:35 UTC the day before.
    assert_eq!(created["nextAttemptAt"], "2026-10-31T18:35:00Z");

    // The same key again: the same job, 200, duplicate.
    let (status, again) = enqueue(&api, body).await;
    assert_eq!((status, again["duplicate"].clone()), (200, json!(true)));
    assert_eq!(job_id(&again), id);

    // Read it back with every agreed field.
    let (status, job) = parts(api.get(&location, &api.read).send().await.unwrap()).await;
    assert_eq!(status, 200);
    for field in [
        "jobId",
        "type",
        "queue",
        "priority",
        "state",
        "attempts",
        "maxAttempts",
        "nextAttemptAt",
        "lastErrorCode",
        "lastError",
        "createdAt",
        "updatedAt",
        "finishedAt",
        "leaseOwner",
        "heartbeatAt",
        "payload",
    ] {
        assert!(job.get(field).is_some(), "{field} missing from {job}");
    }
    assert_eq!(job["payload"], json!({"invoiceId": "inv_7731"}));

    // No payload, or a null one: the default, an empty object.
    for body in [
        json!({"type": "ping"}),
        json!({"type": "ping", "payload": null}),
    ] {
        let (status, created) = enqueue(&api, body.clone()).await;
        assert_eq!(status, 201, "{body}: {created}");
        let (_, stored) = parts(
            api.get(&format!("/jobs/{}", job_id(&created)), &api.read)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(stored["payload"], json!({}), "{body}");
    }

    // Unknown job: 404 JOB_NOT_FOUND in the envelope.
    let (status, missing) = parts(
        api.get(&format!("/jobs/{}", Uuid::now_v7()), &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, error_code(&missing)), (404, "JOB_NOT_FOUND"));

    // Listing: newest first, filtered, in keyset pages.
    for n in 0..5 {
        let (status, _) = enqueue(
            &api,
            json!({"type": "digest", "payload": {"n": n}, "queue": "bulk"}),
        )
        .await;
        assert_eq!(status, 201);
    }
    let (status, page) = parts(
        api.get("/jobs?queue=bulk&limit=2", &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let ns: Vec<i64> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["payload"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, vec![4, 3]);
    let after = page["nextAfter"].as_str().unwrap();
    let (_, page) = parts(
        api.get(
            &format!("/jobs?queue=bulk&limit=2&after={after}"),
            &api.read,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    let ns: Vec<i64> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["payload"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, vec![2, 1]);
    let (_, page) = parts(
        api.get("/jobs?type=generate_invoice_pdf&state=QUEUED", &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1);
    assert!(page.get("nextAfter").is_none(), "{page}");
    let (_, page) = parts(
        api.get("/jobs?state=FAILED", &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(page["jobs"], json!([]));

    // One tenant's jobs.
    for tenant in ["acme", "globex", "acme"] {
        let (status, _) = enqueue(
            &api,
            json!({"type": "digest", "queue": "bulk", "tenant": tenant}),
        )
        .await;
        assert_eq!(status, 201);
    }
    let (status, page) = parts(
        api.get("/jobs?tenant=acme&queue=bulk", &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    let tenants: Vec<&str> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job["tenant"].as_str().unwrap_or("none"))
        .collect();
    assert_eq!((status, tenants), (200, vec!["acme", "acme"]), "{page}");
    // A blank name matches no job and is refused, naming the parameter.
    for (query, field) in [
        ("tenant=", "tenant"),
        ("queue=%20", "queue"),
        ("type=%C2%A0&queue=bulk", "type"),
    ] {
        let (status, refused) = parts(
            api.get(&format!("/jobs?{query}"), &api.read)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, refused["error"]["field"].as_str()),
            (400, Some(field)),
            "{query}: {refused}"
        );
    }
}

/// `delayMs` makes a job due that long after the database's clock at the
/// enqueue (a client with a wrong clock still gets the delay it asked
/// for); with `runAt`, or past the year 10000, it is refused by name and
/// nothing is written.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_delay_is_counted_on_the_databases_clock(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let (status, body) = enqueue(&api, json!({"type": "later", "delayMs": 60000})).await;
    assert_eq!(status, 201, "{body}");
    let delay_s: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM run_after - created_at)::float8 FROM jobs WHERE job_type = 'later'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!((60.0..61.0).contains(&delay_s), "{delay_s}");
    for refused in [
        json!({"type": "refused", "delayMs": 1000, "runAt": "2030-01-01T00:00:00Z"}),
        json!({"type": "refused", "delayMs": 9_000_000_000_000_000_u64}),
        json!({"type": "refused", "delayMs": u64::MAX}),
        json!({"type": "refused", "delayMs": -5}),
    ] {
        let (status, body) = enqueue(&api, refused.clone()).await;
        assert_eq!(
            (status, error_code(&body), body["error"]["field"].as_str()),
            (400, "INVALID_FIELD", Some("delayMs")),
            "{refused}: {body}"
        );
    }
    assert_eq!(rows_of_type(&api, "refused").await, 0);
}

/// Numbers an integer of 64 bits or a double holds are stored as sent,
/// the largest and the smallest among them, and a double written to 17
/// digits (as printf's %.17g and Java write them) is taken: the refusal of
/// a number past them (tests/bad_input.rs) must not catch these.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn payload_numbers_are_stored_as_sent(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let raw = r#"{"type": "a", "payload": {"u": 18446744073709551615, "i": -9223372036854775808,
                  "f": 0.1, "e": 1.5e300, "z": -0.0,
                  "printf": 0.10000000000000001, "java": 4.9e-324}}"#;
    let (status, body) = parts(
        api.post("/jobs", &api.write)
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let stored: String = sqlx::query_scalar(
        "SELECT (payload->>'u') || ' ' || (payload->>'i') || ' ' || (payload->>'f') || ' ' ||
                (payload->'e')::numeric::text
         FROM jobs WHERE job_id = $1",
    )
    .bind(job_id(&body))
    .fetch_one(&pool)
    .await
    .unwrap();
    let expected = format!(
        "18446744073709551615 -9223372036854775808 0.1 15{}",
        "0".repeat(299)
    );
    assert_eq!(stored, expected);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn cancel_answers_by_the_jobs_state(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let (_, queued) = enqueue(&api, json!({"type": "export"})).await;
    let (_, running) = enqueue(&api, json!({"type": "export", "priority": 5})).await;
    let claimed = jobwire_core::claim_batch(
        &pool,
        "default",
        "worker-1",
        1,
        std::time::Duration::from_secs(30),
    )
    .await
    .unwrap();
    // Priority 0 goes first; claim the other one too so `running` runs.
    let claimed_second = jobwire_core::claim_batch(
        &pool,
        "default",
        "worker-1",
        1,
        std::time::Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(claimed[0].job_id(), job_id(&queued));
    assert_eq!(claimed_second[0].job_id(), job_id(&running));
    let (_, waiting) = enqueue(&api, json!({"type": "export"})).await;

    // Not running: CANCELLED at once, audited with the token's name.
    let cancel = |id: Uuid| api.post(&format!("/jobs/{id}/cancel"), &api.write).send();
    let (status, body) = parts(cancel(job_id(&waiting)).await.unwrap()).await;
    assert_eq!((status, body["state"].clone()), (200, json!("CANCELLED")));
    let actor: String =
        sqlx::query_scalar("SELECT actor FROM job_audit WHERE job_id = $1 AND action = 'cancel'")
            .bind(job_id(&waiting))
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(actor, "writer");

    // Running: 409 JOB_RUNNING, and the request is recorded.
    let (status, body) = parts(cancel(job_id(&running)).await.unwrap()).await;
    assert_eq!((status, error_code(&body)), (409, "JOB_RUNNING"));
    assert_eq!(
        body["error"]["message"],
        "Job is running; cancellation is cooperative."
    );
    assert!(
        body["error"]["requestId"]
            .as_str()
            .unwrap()
            .starts_with("req_")
    );
    let state = jobwire_core::job_status(&pool, job_id(&running))
        .await
        .unwrap()
        .state;
    assert_eq!(state, JobState::CancelRequested);

    // Finished: 409 JOB_FINISHED. Unknown: 404.
    let (status, body) = parts(cancel(job_id(&waiting)).await.unwrap()).await;
    assert_eq!((status, error_code(&body)), (409, "JOB_FINISHED"));
    let (status, body) = parts(cancel(Uuid::now_v7()).await.unwrap()).await;
    assert_eq!((status, error_code(&body)), (404, "JOB_NOT_FOUND"));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn fifty_concurrent_enqueues_with_one_key_make_one_job(pool: PgPool) {
    let api = Api::start(pool).await;
    let body = json!({"type": "charge", "payload": {"orderId": 7}, "idempotencyKey": "charge:7"});
    let answers = futures::future::join_all((0..50).map(|_| enqueue(&api, body.clone()))).await;
    let created: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 201)
        .map(|(_, b)| b)
        .collect();
    let duplicates: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, b)| b)
        .collect();
    assert_eq!((created.len(), duplicates.len()), (1, 49), "{answers:?}");
    let id = job_id(created[0]);
    assert!(
        duplicates
            .iter()
            .all(|b| b["duplicate"] == true && job_id(b) == id)
    );
    assert_eq!(api.count("SELECT count(*) FROM jobs").await, 1);
}

/// The server writes concurrent requests' jobs together: a request the
/// database refuses, or the server's own checks, must still fail alone.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn concurrent_good_and_bad_enqueues_each_get_their_own_answer(pool: PgPool) {
    jobwire_core::set_max_payload_bytes(&pool, 200)
        .await
        .unwrap();
    // A refusal of the deployment's own (a trigger), a data exception no
    // check of the server's can see coming.
    jobwire_test_support::refuse_jobs_noted_refuse(&pool).await;
    let api = Api::start(pool).await;
    // Each request's body, and the refusal it must get (none: a 201).
    let case = |i: usize| match i % 8 {
        // The database refuses it: found only by writing.
        3 => (
            json!({"type": "charge", "payload": {"i": i, "note": "refuse"}}),
            Some((400, "INVALID_INPUT")),
        ),
        // Over the database's payload limit: found only by writing.
        5 => (
            json!({"type": "charge", "payload": {"i": i, "blob": "x".repeat(300)}}),
            Some((413, "PAYLOAD_TOO_LARGE")),
        ),
        // The server's own check, before any write.
        7 => (
            json!({"type": "charge", "payload": {"i": i}, "colour": "red"}),
            Some((400, "INVALID_FIELD")),
        ),
        _ => (json!({"type": "charge", "payload": {"i": i}}), None),
    };
    let answers = futures::future::join_all((0..48).map(|i| enqueue(&api, case(i).0))).await;
    let mut written = Vec::new();
    for (i, (status, answer)) in answers.iter().enumerate() {
        match case(i).1 {
            None => {
                assert_eq!(*status, 201, "request {i}: {answer}");
                assert_eq!(answer["payload"]["i"], i, "request {i} got its own job");
                written.push(i as i64);
            }
            Some(refusal) => assert_eq!(
                (*status, error_code(answer)),
                refusal,
                "request {i}: {answer}"
            ),
        }
    }
    let rows: Vec<i64> = sqlx::query_scalar("SELECT (payload->>'i')::bigint FROM jobs ORDER BY 1")
        .fetch_all(&api.pool)
        .await
        .unwrap();
    assert_eq!(rows, written, "every accepted job once, no refused one");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn dead_letters_queues_and_health(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    // Three dead letters of one group, one of another.
    for (job_type, code) in [
        ("deliver_webhook", "HTTP_503"),
        ("deliver_webhook", "HTTP_503"),
        ("deliver_webhook", "HTTP_503"),
        ("send_email", "SMTP_DOWN"),
    ] {
        jobwire_core::enqueue(
            &pool,
            &NewJob::new(job_type, json!({})).with_max_attempts(1),
        )
        .await
        .unwrap();
        let claimed =
            jobwire_core::claim_batch(&pool, "default", "w", 1, std::time::Duration::from_secs(30))
                .await
                .unwrap();
        jobwire_core::fail(
            &pool,
            "w",
            claimed[0].lease,
            None,
            code,
            &format!("{code} from upstream"),
        )
        .await
        .unwrap();
    }
    let (status, groups) = parts(api.get("/dead-letter", &api.read).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let first = &groups["groups"][0];
    assert_eq!(
        (
            first["type"].clone(),
            first["errorCode"].clone(),
            first["count"].clone()
        ),
        (json!("deliver_webhook"), json!("HTTP_503"), json!(3))
    );
    assert_eq!(first["sampleError"], "HTTP_503 from upstream");
    assert!(first["firstFailedAt"].is_string() && first["lastFailedAt"].is_string());

    // Retry one group: 202 with the count, audited with the token's name;
    // the same call again requeues nothing.
    let retry = json!({"type": "deliver_webhook", "errorCode": "HTTP_503"});
    let (status, body) = parts(
        api.post("/dead-letter/retry", &api.admin)
            .json(&retry)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, body["requeued"].clone()), (202, json!(3)));
    let until = body["until"].clone();
    assert_eq!(
        api.count("SELECT count(*) FROM job_audit WHERE action = 'replay' AND actor = 'admin'")
            .await,
        3
    );
    let again = json!({"type": "deliver_webhook", "errorCode": "HTTP_503", "until": until});
    let (status, body) = parts(
        api.post("/dead-letter/retry", &api.admin)
            .json(&again)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, body["requeued"].clone()), (202, json!(0)));
    // A write token may not retry.
    let (status, body) = parts(
        api.post("/dead-letter/retry", &api.write)
            .json(&retry)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, error_code(&body)), (403, "FORBIDDEN"));

    // Queues: depth by state and pause / resume.
    let (status, queues) = parts(api.get("/queues", &api.read).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let default = &queues["queues"][0];
    assert_eq!(default["name"], "default");
    assert_eq!(default["dispatch"], "postgres");
    assert_eq!(default["depth"]["queued"], 3);
    assert_eq!(default["depth"]["failed"], 1);
    assert!(default["oldestRunnableAgeSeconds"].as_f64().unwrap() >= 0.0);
    let (status, body) = parts(
        api.post("/queues/default/pause", &api.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["paused"].clone(), body["known"].clone()),
        (200, json!(true), json!(true))
    );
    // A name no queue had is paused all the same (ahead of its first job),
    // and the answer says it was unknown: most often a typo.
    let (status, body) = parts(
        api.post("/queues/defualt/pause", &api.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["paused"].clone(), body["known"].clone()),
        (200, json!(true), json!(false))
    );
    // Paused: nothing is claimed.
    let claimed = jobwire_core::claim_batch(
        &pool,
        "default",
        "w",
        10,
        std::time::Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(claimed.is_empty());
    let (status, body) = parts(
        api.post("/queues/default/resume", &api.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, body["paused"].clone()), (200, json!(false)));
    let claimed = jobwire_core::claim_batch(
        &pool,
        "default",
        "w",
        10,
        std::time::Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), 3);

    // Health needs no token; readiness checks the database.
    for path in ["/healthz", "/readyz"] {
        let (status, _) = parts(api.client.get(api.url(path)).send().await.unwrap()).await;
        assert_eq!(status, 200, "{path}");
    }
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_request_id_is_echoed_and_tokens_can_be_revoked(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let response = api
        .get(&format!("/jobs/{}", Uuid::now_v7()), &api.read)
        .header("X-Request-Id", "trace-42")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-42");
    let (_, body) = parts(response).await;
    assert_eq!(body["error"]["requestId"], "trace-42");

    // The database holds a hash, never the secret.
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT secret_sha256 FROM job_api_tokens WHERE name = 'reader'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(stored.len(), 32);
    let dump: String = sqlx::query_scalar("SELECT string_agg(t::text, ' ') FROM job_api_tokens t")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(!dump.contains(api.read.rsplit('_').next().unwrap()));

    // The server has checked the token (the request above) and keeps it;
    // the revocation reaches it on the token channel.
    assert!(
        jobwire_core::revoke_api_token(&pool, "reader")
            .await
            .unwrap()
    );
    let (status, body) = common::once_refused(&api, &api.read).await;
    assert_eq!((status, error_code(&body)), (401, "UNAUTHENTICATED"));
    assert!(
        !jobwire_core::revoke_api_token(&pool, "reader")
            .await
            .unwrap()
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn readiness_says_when_the_database_is_not_usable(pool: PgPool) {
    // A database without the schema.
    sqlx::query("DROP TABLE _sqlx_migrations")
        .execute(&pool)
        .await
        .unwrap();
    let api = Api::start(pool.clone()).await;
    let (status, body) = parts(api.client.get(api.url("/readyz")).send().await.unwrap()).await;
    assert_eq!((status, error_code(&body)), (503, "SCHEMA_NOT_READY"));

    // A database that cannot be reached: 503, never a 500.
    let unreachable = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(std::time::Duration::from_secs(1))
        .connect_lazy("postgres://postgres@127.0.0.1:1/nowhere")
        .unwrap();
    let server = jobwire_server::HttpServer::bind("127.0.0.1:0".parse().unwrap(), unreachable)
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(server.run(stop.clone()));
    let (status, body) = parts(reqwest::get(format!("{base}/readyz")).await.unwrap()).await;
    assert_eq!((status, error_code(&body)), (503, "DATABASE_UNAVAILABLE"));
    let (status, body) = parts(
        api.client
            .get(format!("{base}/queues"))
            .bearer_auth(&api.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, error_code(&body)), (503, "DATABASE_UNAVAILABLE"));
    let (status, _) = parts(reqwest::get(format!("{base}/healthz")).await.unwrap()).await;
    assert_eq!(status, 200);
    stop.cancel();
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn schedules_over_http(pool: PgPool) {
    let api = Api::start(pool).await;
    let body = json!({ "cron": "0 8 * * *", "timezone": "Asia/Kolkata",
                       "type": "send_daily_digest", "jitterSeconds": 600 });
    let put = |body: Value| {
        api.client
            .put(api.url("/schedules/digest"))
            .bearer_auth(&api.admin)
            .json(&body)
            .send()
    };
    let (status, created) = parts(put(body.clone()).await.unwrap()).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["timezone"], "Asia/Kolkata");
    assert_eq!(created["missed"], "latest");
    let next: Vec<&str> = created["nextOccurrences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(next.len(), 3);
    assert!(next.iter().all(|at| at.ends_with("T02:30:00Z")), "{next:?}");
    let (status, _) = parts(put(body.clone()).await.unwrap()).await;
    assert_eq!(status, 200, "replaced");
    assert!(created.get("tenant").is_none(), "{created}");
    // A schedule whose jobs work for a tenant.
    let (status, for_acme) = parts(
        api.client
            .put(api.url("/schedules/acme-nightly"))
            .bearer_auth(&api.admin)
            .json(&json!({ "cron": "0 2 * * *", "timezone": "UTC",
                           "type": "nightly_report", "tenant": "acme" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &for_acme["tenant"]),
        (201, &json!("acme")),
        "{for_acme}"
    );
    let gone = api
        .client
        .delete(api.url("/schedules/acme-nightly"))
        .bearer_auth(&api.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 204);

    let (status, listed) = parts(api.get("/schedules", &api.read).send().await.unwrap()).await;
    assert_eq!(
        (status, listed["schedules"].as_array().unwrap().len()),
        (200, 1)
    );
    let (status, paused) = parts(
        api.post("/schedules/digest/pause", &api.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (
            status,
            paused["paused"].clone(),
            paused["nextOccurrences"].clone()
        ),
        (200, json!(true), json!([]))
    );
    let (status, resumed) = parts(
        api.post("/schedules/digest/resume", &api.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, resumed["paused"].clone()), (200, json!(false)));

    // Bad input names the field; nothing is stored.
    for (bad, field) in [
        (
            json!({"cron": "0 25 * * *", "timezone": "UTC", "type": "x"}),
            "cron",
        ),
        (
            json!({"cron": "0 0 30 2 *", "timezone": "UTC", "type": "x"}),
            "cron",
        ),
        (
            json!({"cron": "0 8 * * *", "timezone": "Asia/Calcuta", "type": "x"}),
            "timezone",
        ),
        (
            json!({"cron": "0 8 * * *", "timezone": "UTC", "type": "x", "jitterSeconds": 90000}),
            "jitterSeconds",
        ),
        (
            json!({"cron": "0 8 * * *", "timezone": "UTC", "type": "x", "jitterSeconds": -1}),
            "jitterSeconds",
        ),
        (
            json!({"cron": "0 8 * * *", "timezone": "UTC", "type": "x", "missed": "sometimes"}),
            "missed",
        ),
        (json!({"cron": "0 8 * * *", "timezone": "UTC"}), "type"),
    ] {
        let response = api
            .client
            .put(api.url("/schedules/other"))
            .bearer_auth(&api.admin)
            .json(&bad)
            .send()
            .await
            .unwrap();
        let (status, body) = parts(response).await;
        assert_eq!(
            (status, body["error"]["field"].as_str()),
            (400, Some(field)),
            "{bad} -> {body}"
        );
        // A number outside its type says the field's own range, not the type's.
        if bad["jitterSeconds"] == -1 {
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("from 0 to 86400"), "{body}");
        }
    }
    let (status, body) = parts(
        api.client
            .put(api.url("/schedules/other"))
            .bearer_auth(&api.write)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, error_code(&body)), (403, "FORBIDDEN"));
    let (status, body) = parts(api.get("/schedules/other", &api.read).send().await.unwrap()).await;
    assert_eq!((status, error_code(&body)), (404, "SCHEDULE_NOT_FOUND"));

    let delete = || {
        api.client
            .delete(api.url("/schedules/digest"))
            .bearer_auth(&api.admin)
            .send()
    };
    assert_eq!(delete().await.unwrap().status(), 204);
    let (status, body) = parts(delete().await.unwrap()).await;
    assert_eq!((status, error_code(&body)), (404, "SCHEDULE_NOT_FOUND"));
}

/// A schedule stored with a cron or zone this version cannot evaluate (by
/// hand, or by a version that accepted it) is shown with its problem; it
/// neither hides the good ones nor makes a read fail.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_schedule_that_cannot_be_evaluated_is_shown_with_its_problem(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let (status, created) = parts(
        api.client
            .put(api.url("/schedules/digest"))
            .bearer_auth(&api.admin)
            .json(&json!({ "cron": "0 8 * * *", "timezone": "UTC", "type": "send_daily_digest" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    sqlx::query(
        "INSERT INTO job_schedules (name, cron, timezone, job_type, next_run_at)
         VALUES ('on-mars', '0 8 * * *', 'Mars/Olympus_Mons', 'noop', now() + interval '1 hour')",
    )
    .execute(&pool)
    .await
    .unwrap();

    let (status, listed) = parts(api.get("/schedules", &api.read).send().await.unwrap()).await;
    assert_eq!(status, 200, "{listed}");
    let schedules = listed["schedules"].as_array().unwrap();
    let named = |name: &str| {
        schedules
            .iter()
            .find(|schedule| schedule["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {listed}"))
            .clone()
    };
    let (good, bad) = (named("digest"), named("on-mars"));
    assert_eq!(
        good["nextOccurrences"].as_array().unwrap().len(),
        3,
        "{good}"
    );
    assert!(good.get("problem").is_none(), "{good}");
    assert_eq!(bad["nextOccurrences"], json!([]), "{bad}");
    let problem = bad["problem"].as_str().unwrap_or_default();
    assert!(
        problem.contains("\"Mars/Olympus_Mons\" is not a time zone name"),
        "{bad}"
    );

    let (status, shown) = parts(
        api.get("/schedules/on-mars", &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &shown["problem"]),
        (200, &bad["problem"]),
        "{shown}"
    );

    // Come due, the scheduler pauses it; its problem is still shown.
    sqlx::query(
        "UPDATE job_schedules SET next_run_at = now() - interval '1 minute' WHERE name = 'on-mars'",
    )
    .execute(&pool)
    .await
    .unwrap();
    jobwire_core::fire_due_schedules(&pool, 10).await.unwrap();
    let (status, paused) = parts(
        api.get("/schedules/on-mars", &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &paused["paused"], &paused["problem"]),
        (200, &json!(true), &bad["problem"]),
        "{paused}"
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn an_enqueue_records_the_callers_trace_context(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let response = api
        .post("/jobs", &api.write)
        .header("traceparent", traceparent)
        .header("tracestate", "vendor=1")
        .json(&json!({"type": "send_email"}))
        .send()
        .await
        .unwrap();
    let (status, body) = parts(response).await;
    assert_eq!(status, 201, "{body}");
    let stored: (Option<String>, Option<String>) =
        sqlx::query_as("SELECT traceparent, tracestate FROM jobs WHERE job_id = $1")
            .bind(job_id(&body))
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(stored, (Some(traceparent.into()), Some("vendor=1".into())));
}

/// POST /jobs answers a new job without reading it back (it builds the
/// answer from the request and what the enqueue returned): every field must
/// read as `GET /jobs/{jobId}` reads it from the table.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_new_jobs_answer_reads_as_the_job_does(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let bound =
        jobwire_core::create_tenant_api_token(&pool, "acme-writer", Scope::Write, Some("acme"))
            .await
            .unwrap()
            .secret;
    let requests = [
        (&api.write, json!({"type": "send_email"})),
        (
            &api.write,
            json!({
                "type": "build_report",
                "payload": {"n": 1.5, "big": 18446744073709551615u64, "neg": -7,
                            "text": "ünï \"<b>\" \u{1F600}", "list": [1, null, true],
                            "nested": {"b": 1, "a": {"z": []}}},
                "runAt": "2099-01-01T00:00:00+05:30", "priority": -3, "queue": "reports",
                "maxAttempts": 3, "idempotencyKey": "report:1", "tenant": "globex"
            }),
        ),
        (
            &api.write,
            json!({"type": "late", "runAt": "2001-01-01T00:00:00Z"}),
        ),
        // A token bound to a tenant: the tenant comes from the token, the
        // key is stored scoped to it.
        (&bound, json!({"type": "sync", "idempotencyKey": "k"})),
    ];
    for (token, request) in requests {
        let response = api
            .post("/jobs", token)
            .header(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            )
            .json(&request)
            .send()
            .await
            .unwrap();
        let (status, mut created) = parts(response).await;
        assert_eq!(status, 201, "{created}");
        assert_eq!(
            created.as_object_mut().unwrap().remove("duplicate"),
            Some(json!(false))
        );
        // Read by the same token: what it sees of the job.
        let (status, read) = parts(
            api.get(&format!("/jobs/{}", job_id(&created)), token)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{read}");
        assert_eq!(created, read, "the answer to {request}");
    }
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn one_job_is_replayed_found_by_id_prefix_and_shows_its_expired_lease(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    // A dead letter, replayed alone.
    let failed = jobwire_core::enqueue(&pool, &NewJob::new("flaky", json!({})).with_queue("work"))
        .await
        .unwrap()
        .job_id;
    let claimed =
        jobwire_core::claim_batch(&pool, "work", "w1", 1, std::time::Duration::from_secs(60))
            .await
            .unwrap();
    jobwire_core::fail(&pool, "w1", claimed[0].lease, None, "BOOM", "it broke")
        .await
        .unwrap();
    let (status, body) = parts(
        api.post(&format!("/jobs/{failed}/replay"), &api.write)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "QUEUED", "{body}");
    assert_eq!(
        api.count(&format!(
            "SELECT count(*) FROM job_audit WHERE job_id = '{failed}' AND actor = 'writer'"
        ))
        .await,
        1,
        "audited under the token's name"
    );
    // Again: it is not FAILED any more.
    let (status, body) = parts(
        api.post(&format!("/jobs/{failed}/replay"), &api.write)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, error_code(&body)), (409, "WRONG_STATE"), "{body}");
    let unknown = Uuid::now_v7();
    let (status, body) = parts(
        api.post(&format!("/jobs/{unknown}/replay"), &api.write)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, error_code(&body)),
        (404, "JOB_NOT_FOUND"),
        "{body}"
    );

    // Found by a prefix of its id (with or without dashes), and only it.
    let other = jobwire_core::enqueue(&pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .job_id;
    let whole = failed.to_string();
    let distinct = whole
        .chars()
        .zip(other.to_string().chars())
        .position(|(a, b)| a != b)
        .unwrap();
    let prefix = &whole[..=distinct];
    for asked in [prefix.to_owned(), prefix.replace('-', "")] {
        let (status, body) = parts(
            api.get(&format!("/jobs?idPrefix={asked}"), &api.read)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let ids: Vec<&str> = body["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|job| job["jobId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec![whole.as_str()], "prefix {asked}");
    }

    // A worker dies holding it: the sweep records when its lease expired.
    let claimed =
        jobwire_core::claim_batch(&pool, "work", "w2", 1, std::time::Duration::from_secs(60))
            .await
            .unwrap();
    assert_eq!(claimed[0].lease.job_id, failed);
    jobwire_test_support::expire_lease(&pool, failed)
        .await
        .unwrap();
    jobwire_core::sweep_expired_leases(&pool, 10).await.unwrap();
    let (_, body) = parts(
        api.get(&format!("/jobs/{failed}"), &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["lastErrorCode"], "LEASE_EXPIRED", "{body}");
    assert!(body["leaseExpiredAt"].is_string(), "{body}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_error_code_filter_lists_one_dead_letter_group(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    sqlx::query(
        "INSERT INTO jobs (job_id, job_type, state, attempt_count, finished_at, last_error_code)
         SELECT jobwire_uuidv7(), 'deliver_webhook', 'FAILED', 1, now(), code
         FROM unnest(ARRAY['HTTP_503', 'HTTP_503', 'HTTP_410']) AS code",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (status, body) = parts(
        api.get(
            "/jobs?state=FAILED&type=deliver_webhook&errorCode=HTTP_503",
            &api.read,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let jobs = body["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{body}");
    assert!(
        jobs.iter().all(|job| job["lastErrorCode"] == "HTTP_503"),
        "{body}"
    );
    assert!(body.get("nextAfter").is_none(), "{body}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn tenant_caps_over_http(pool: PgPool) {
    let api = Api::start(pool).await;
    let put = |path: &str, token: &str, body: Value| {
        api.client
            .put(api.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let (status, caps) = parts(
        put(
            "/queues/imports/tenant-cap",
            &api.admin,
            json!({"maxRunning": 3}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        (status, caps["defaultMaxRunning"].clone()),
        (200, json!(3)),
        "{caps}"
    );
    let (status, caps) = parts(
        put(
            "/queues/imports/tenants/bigco",
            &api.admin,
            json!({"maxRunning": 10}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{caps}");
    assert_eq!(caps["tenants"][0]["tenant"], "bigco");
    assert_eq!(caps["tenants"][0]["maxRunning"], 10);

    // An enqueue names its tenant, and the job shows it.
    let (status, job) = enqueue(
        &api,
        json!({"type": "import_row", "queue": "imports", "tenant": "bigco"}),
    )
    .await;
    assert_eq!(
        (status, job["tenant"].clone()),
        (201, json!("bigco")),
        "{job}"
    );
    let (status, listed) = parts(
        api.get("/queues/imports/tenants", &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(listed["tenants"][0]["waiting"], 1, "{listed}");

    // Bad input: a clear 4xx, nothing changed.
    for (path, body, code) in [
        (
            "/queues/imports/tenant-cap",
            json!({"maxRunning": 0}),
            "INVALID_FIELD",
        ),
        (
            "/queues/imports/tenant-cap",
            json!({"maxRunning": -1}),
            "INVALID_FIELD",
        ),
        ("/queues/imports/tenant-cap", json!({}), "INVALID_FIELD"),
        (
            "/queues/imports/tenant-cap",
            json!({"maxRunning": 3, "burst": 1}),
            "INVALID_FIELD",
        ),
        (
            "/queues/imports/tenants/%20",
            json!({"maxRunning": 3}),
            "INVALID_FIELD",
        ),
        (
            "/queues/imports/tenants/acme%1B%5B2J",
            json!({"maxRunning": 3}),
            "INVALID_FIELD",
        ),
        (
            "/queues/imp%0Aorts/tenant-cap",
            json!({"maxRunning": 3}),
            "INVALID_QUEUE",
        ),
    ] {
        let (status, body) = parts(put(path, &api.admin, body).await.unwrap()).await;
        assert_eq!((status, error_code(&body)), (400, code), "{path}: {body}");
    }
    let (status, body) = enqueue(
        &api,
        json!({"type": "import_row", "queue": "imports", "tenant": "   "}),
    )
    .await;
    assert_eq!(
        (status, error_code(&body)),
        (400, "INVALID_FIELD"),
        "{body}"
    );
    assert_eq!(body["error"]["field"], "tenant");
    // Scopes: reading is `read`, changing is `admin`.
    let (status, body) = parts(
        put(
            "/queues/imports/tenant-cap",
            &api.write,
            json!({"maxRunning": 1}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((status, error_code(&body)), (403, "FORBIDDEN"));
    let (status, _) = parts(
        api.client
            .get(api.url("/queues/imports/tenants"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401);
    let caps = jobwire_core::tenant_caps(&api.pool, "imports")
        .await
        .unwrap();
    assert_eq!(caps.default_max_running, Some(3), "nothing changed");

    // Removing: the override, then the default.
    let delete = |path: &str| {
        api.client
            .delete(api.url(path))
            .bearer_auth(&api.admin)
            .send()
    };
    let (status, caps) = parts(delete("/queues/imports/tenants/bigco").await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(caps["tenants"].as_array().unwrap().len(), 0, "{caps}");
    let (status, caps) = parts(delete("/queues/imports/tenant-cap").await.unwrap()).await;
    assert_eq!(
        (status, caps["defaultMaxRunning"].clone()),
        (200, Value::Null)
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn enqueue_limits_over_http(pool: PgPool) {
    let api = Api::start(pool).await;
    // The metrics recorder is the process's: counts are compared with what
    // it held before this test's refusals.
    let counted_before = metrics_text(&api).await;
    let put = |path: &str, token: &str, body: Value| {
        api.client
            .put(api.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let (status, limits) = parts(
        put(
            "/queues/imports/limits",
            &api.admin,
            json!({"maxQueued": 2, "shed": {"depth": 1, "priority": 0}}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{limits}");
    assert_eq!(limits["maxQueued"], 2);
    assert_eq!(limits["shed"], json!({"depth": 1, "priority": 0}));
    // Shedding at the cap's depth would never refuse anything: 400, and
    // the limits stay.
    let (status, body) = parts(
        put(
            "/queues/imports/limits",
            &api.admin,
            json!({"maxQueued": 2, "shed": {"depth": 2, "priority": 0}}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        (status, error_code(&body)),
        (400, "INVALID_FIELD"),
        "{body}"
    );
    assert_eq!(body["error"]["field"], "shed.depth", "{body}");
    assert_eq!(
        jobwire_core::queue_limits(&api.pool, "imports")
            .await
            .unwrap()
            .shed
            .map(|shed| shed.depth),
        Some(1)
    );
    let (status, caps) = parts(
        put(
            "/queues/imports/tenant-limits",
            &api.admin,
            json!({"enqueueRate": {"jobs": 1, "perSeconds": 3600}}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{caps}");
    assert_eq!(
        caps["defaults"]["enqueueRate"],
        json!({"jobs": 1, "perSeconds": 3600})
    );

    let row =
        |priority: i32| json!({"type": "import_row", "queue": "imports", "priority": priority});
    assert_eq!(enqueue(&api, row(0)).await.0, 201);
    // Shedding: the queue holds 1, so only priority 0 or more urgent gets in.
    let response = api
        .post("/jobs", &api.write)
        .json(&row(5))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_code(&body), "QUEUE_FULL", "{body}");
    assert_eq!(body["error"]["retryAfterMs"], 1000, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("priority 0"),
        "{body}"
    );
    assert_eq!(enqueue(&api, row(-1)).await.0, 201);
    // Full: two wait, so even an urgent job is refused.
    let (status, body) = enqueue(&api, row(-5)).await;
    assert_eq!((status, error_code(&body)), (429, "QUEUE_FULL"), "{body}");

    // The tenant's rate: one an hour.
    let tenant_row = json!({"type": "import_row", "queue": "other", "tenant": "acme"});
    jobwire_core::set_tenant_limits(
        &api.pool,
        "other",
        Some("acme"),
        &jobwire_core::TenantLimits {
            enqueue_rate: Some(jobwire_core::EnqueueRate {
                jobs: 1,
                per_seconds: 3600,
            }),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(enqueue(&api, tenant_row.clone()).await.0, 201);
    let response = api
        .post("/jobs", &api.write)
        .json(&tenant_row)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let wait: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(wait > 1 && wait <= 7200, "Retry-After {wait}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_code(&body), "RATE_LIMITED", "{body}");

    // Nothing was written by any refusal.
    let (_, listed) = parts(api.get("/jobs?limit=100", &api.read).send().await.unwrap()).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 3, "{listed}");

    // The queue drains: one of its two jobs claimed, an urgent job gets in.
    let claimed = jobwire_core::claim_batch(
        &api.pool,
        "imports",
        "w",
        1,
        std::time::Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(enqueue(&api, row(-5)).await.0, 201);

    // A tenant at its own cap on waiting jobs: 429, named in the message.
    jobwire_core::set_tenant_limits(
        &api.pool,
        "other",
        Some("globex"),
        &jobwire_core::TenantLimits {
            max_queued: Some(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let globex_row = json!({"type": "import_row", "queue": "other", "tenant": "globex"});
    assert_eq!(enqueue(&api, globex_row.clone()).await.0, 201);
    let (status, body) = enqueue(&api, globex_row).await;
    assert_eq!((status, error_code(&body)), (429, "QUEUE_FULL"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("globex"),
        "{body}"
    );
    let (_, listed) = parts(api.get("/jobs?limit=100", &api.read).send().await.unwrap()).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 5, "{listed}");

    // Each refusal is counted on /metrics, once, by queue and by the limit
    // that refused it.
    let counted = metrics_text(&api).await;
    let newly_refused =
        |queue, limit| refused(&counted, queue, limit) - refused(&counted_before, queue, limit);
    assert_eq!(newly_refused("imports", "shed"), 1.0, "{counted}");
    assert_eq!(newly_refused("imports", "max_queued"), 1.0, "{counted}");
    assert_eq!(newly_refused("other", "enqueue_rate"), 1.0, "{counted}");
    assert_eq!(
        newly_refused("other", "tenant_max_queued"),
        1.0,
        "{counted}"
    );
    assert_eq!(newly_refused("imports", "enqueue_rate"), 0.0, "{counted}");

    // Concurrent requests share statements, and a refused statement is
    // written again in halves: still one count per refused request.
    jobwire_core::set_queue_limits(
        &api.pool,
        "refused-together",
        &jobwire_core::QueueLimits {
            max_queued: Some(2),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let burst = json!({"type": "import_row", "queue": "refused-together"});
    let answers = futures::future::join_all((0..12).map(|_| enqueue(&api, burst.clone()))).await;
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    // Concurrent statements do not see each other's rows, so the depth can
    // be passed by a few (docs/tenants.md); what is refused is counted.
    let written = statuses.iter().filter(|&&status| status == 201).count();
    let refused_now = statuses.iter().filter(|&&status| status == 429).count();
    assert_eq!(written + refused_now, 12, "{statuses:?}");
    assert!(refused_now >= 6, "{statuses:?}");
    assert_eq!(
        api.count("SELECT count(*) FROM jobs WHERE queue = 'refused-together'")
            .await,
        written as i64
    );
    let counted_after_burst = metrics_text(&api).await;
    assert_eq!(
        refused(&counted_after_burst, "refused-together", "max_queued")
            - refused(&counted_before, "refused-together", "max_queued"),
        refused_now as f64,
        "{counted_after_burst}"
    );

    // Bad bodies: a clear 400, nothing changed.
    // Each names the field at fault as the API spells it.
    for (path, body, field) in [
        (
            "/queues/imports/limits",
            json!({"maxQueued": 0}),
            "maxQueued",
        ),
        (
            "/queues/imports/limits",
            json!({"shed": {"depth": 0, "priority": 0}}),
            "shed.depth",
        ),
        (
            "/queues/imports/limits",
            json!({"shed": {"depth": 3}}),
            "shed",
        ),
        (
            "/queues/imports/limits",
            json!({"maxQueued": 3, "burst": 1}),
            "burst",
        ),
        (
            "/queues/imports/tenant-limits",
            json!({"enqueueRate": {"jobs": 1, "perSeconds": 0}}),
            "enqueueRate.perSeconds",
        ),
        (
            "/queues/imports/tenant-limits",
            json!({"enqueueRate": {"jobs": 0, "perSeconds": 1}}),
            "enqueueRate.jobs",
        ),
        (
            "/queues/imports/tenant-limits",
            json!({"maxRunning": 0}),
            "maxRunning",
        ),
        ("/queues/imports/tenants/acme", json!({}), "maxRunning"),
        // A missing field is named where it is missing.
        (
            "/queues/imports/tenant-limits",
            json!({"enqueueRate": {"jobs": 1}}),
            "enqueueRate.perSeconds",
        ),
    ] {
        let (status, answer) = parts(put(path, &api.admin, body.clone()).await.unwrap()).await;
        assert_eq!(
            (status, error_code(&answer)),
            (400, "INVALID_FIELD"),
            "{path} {body}: {answer}"
        );
        assert!(
            answer["error"]["field"]
                .as_str()
                .is_some_and(|got| got.contains(field)),
            "{path} {body}: {answer}"
        );
    }
    // A number past its type says the field's own range, not the type's.
    let (status, answer) = parts(
        put(
            "/queues/imports/limits",
            &api.admin,
            json!({"maxQueued": 5_000_000_000_u64}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("from 1 to 1000000000")),
        "{answer}"
    );
    // Scopes: reading is `read`, changing is `admin`.
    let (status, _) = parts(
        put("/queues/imports/limits", &api.write, json!({}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403);
    let (status, limits) = parts(
        api.get("/queues/imports/limits", &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, limits["maxQueued"].clone()), (200, json!(2)));

    // Removed: the queue takes jobs again.
    let (status, limits) = parts(
        api.client
            .delete(api.url("/queues/imports/limits"))
            .bearer_auth(&api.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(limits.get("maxQueued").is_none(), "{limits}");
    assert_eq!(enqueue(&api, row(9)).await.0, 201);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_token_bound_to_a_tenant_keeps_to_its_jobs(pool: PgPool) {
    let api = Api::start(pool).await;
    let acme = jobwire_core::create_tenant_api_token(
        &api.pool,
        "acme-app",
        jobwire_core::Scope::Write,
        Some("acme"),
    )
    .await
    .unwrap()
    .secret;
    let post = |body: Value| api.post("/jobs", &acme).json(&body).send();
    // Its enqueues are acme's, named or not.
    let (status, job) = parts(post(json!({"type": "import_row"})).await.unwrap()).await;
    assert_eq!(
        (status, job["tenant"].clone()),
        (201, json!("acme")),
        "{job}"
    );
    let own = job_id(&job);
    let (status, _) = parts(
        post(json!({"type": "import_row", "tenant": "acme"}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201);
    let (status, body) = parts(
        post(json!({"type": "import_row", "tenant": "bigco"}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, error_code(&body)), (403, "FORBIDDEN"), "{body}");

    // It reads its own jobs; another tenant's job is not there for it.
    let (status, _) = parts(
        api.get(&format!("/jobs/{own}"), &acme)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let (_, other) = enqueue(&api, json!({"type": "import_row", "tenant": "bigco"})).await;
    let other = job_id(&other);
    let (status, body) = parts(
        api.get(&format!("/jobs/{other}"), &acme)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, error_code(&body)), (404, "JOB_NOT_FOUND"));
    let (status, _) = parts(
        api.post(&format!("/jobs/{other}/cancel"), &acme)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(
        jobwire_core::job_status(&api.pool, other)
            .await
            .unwrap()
            .state,
        JobState::Queued,
        "not cancelled"
    );
    let (status, _) = parts(
        api.post(&format!("/jobs/{own}/cancel"), &acme)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);

    // Its idempotency keys are its tenant's own: another tenant's job under
    // the same key is neither returned nor in the way.
    let keyed =
        |tenant: &str| json!({"type": "import_row", "tenant": tenant, "idempotencyKey": "row-7"});
    let (status, theirs) = enqueue(&api, keyed("bigco")).await;
    assert_eq!(status, 201, "{theirs}");
    let (status, mine) = parts(post(keyed("acme")).await.unwrap()).await;
    assert_eq!(
        (status, mine["tenant"].clone()),
        (201, json!("acme")),
        "{mine}"
    );
    assert_ne!(job_id(&mine), job_id(&theirs));
    // It gets back the key it sent, whatever form the table keeps it in.
    assert_eq!(mine["idempotencyKey"], "row-7", "{mine}");
    let (status, again) = parts(post(keyed("acme")).await.unwrap()).await;
    assert_eq!((status, again["duplicate"].clone()), (200, json!(true)));
    assert_eq!(job_id(&again), job_id(&mine));
    assert_eq!(again["idempotencyKey"], "row-7", "{again}");
    let (_, read) = parts(
        api.get(&format!("/jobs/{}", job_id(&mine)), &acme)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(read["idempotencyKey"], "row-7", "{read}");
    // A key of the scoped shape written by an unbound producer for another
    // tenant: refused without showing that job.
    let squatted =
        json!({"type": "import_row", "tenant": "bigco", "idempotencyKey": "tenant:4:acme:row-8"});
    assert_eq!(enqueue(&api, squatted).await.0, 201);
    let (status, body) = parts(
        post(json!({"type": "import_row", "idempotencyKey": "row-8"}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, error_code(&body)),
        (409, "IDEMPOTENCY_KEY_TAKEN"),
        "{body}"
    );
    assert!(
        body.get("jobId").is_none() && !body.to_string().contains("bigco"),
        "{body}"
    );
    // Its keys are checked as it sent them, before the tenant's name is
    // added: an empty key is refused as for any token (it used to be stored
    // as `tenant:4:acme:`, making every later empty key a duplicate), and
    // the bound it is told is the one that applies to it.
    let before = rows_of_type(&api, "keyed_by_acme").await;
    let room = 1024 - "tenant:4:acme:".len();
    for (key, why) in [
        (String::new(), "empty"),
        (
            "k".repeat(room + 1),
            "one byte over the room the tenant's name leaves",
        ),
    ] {
        let (status, body) = parts(
            post(json!({"type": "keyed_by_acme", "idempotencyKey": key}))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, error_code(&body), body["error"]["field"].clone()),
            (400, "INVALID_FIELD", json!("idempotencyKey")),
            "{why}: {body}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("1 to {room} bytes")),
            "{why}: {body}"
        );
    }
    assert_eq!(
        rows_of_type(&api, "keyed_by_acme").await,
        before,
        "nothing written"
    );
    let (status, body) = parts(
        post(json!({"type": "keyed_by_acme", "idempotencyKey": "k".repeat(room)}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "a key of exactly the room is taken: {body}");
    assert_eq!(body["idempotencyKey"], "k".repeat(room), "{body}");

    // Every call over many jobs or a queue refuses it.
    for path in [
        "/jobs",
        "/dead-letter",
        "/queues",
        "/queues/default/tenants",
    ] {
        let (status, body) = parts(api.get(path, &acme).send().await.unwrap()).await;
        assert_eq!(
            (status, error_code(&body)),
            (403, "FORBIDDEN"),
            "{path}: {body}"
        );
        assert!(
            body["error"]["message"].as_str().unwrap().contains("acme"),
            "{body}"
        );
    }
    // Never an admin token.
    assert!(
        jobwire_core::create_tenant_api_token(
            &api.pool,
            "acme-admin",
            jobwire_core::Scope::Admin,
            Some("acme"),
        )
        .await
        .is_err()
    );
}

/// A schedule read over HTTP says when its last occurrence fired, not only
/// which occurrence that was.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_schedule_shows_when_it_last_fired(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let created = api
        .client
        .put(api.url("/schedules/digest"))
        .bearer_auth(&api.admin)
        .json(&json!({"cron": "* * * * *", "timezone": "UTC", "type": "send_daily_digest"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let (_, before) = parts(
        api.get("/schedules/digest", &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(before["lastFiredAt"], Value::Null, "{before}");

    // Due a minute ago, then fired by a scheduler's pass.
    sqlx::query(
        "UPDATE job_schedules SET next_run_at = date_trunc('minute', now()) - interval '1 minute'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let fired = jobwire_core::fire_due_schedules(&pool, 10).await.unwrap();
    assert_eq!(fired.enqueued, 1, "{fired:?}");
    let (_, after) = parts(
        api.get("/schedules/digest", &api.read)
            .send()
            .await
            .unwrap(),
    )
    .await;
    let at: chrono::DateTime<chrono::Utc> = after["lastFiredAt"].as_str().unwrap().parse().unwrap();
    let occurrence: chrono::DateTime<chrono::Utc> =
        after["lastFiredFor"].as_str().unwrap().parse().unwrap();
    assert!(at >= occurrence, "{after}");
}

/// `/metrics` as a `read` token sees it.
async fn metrics_text(api: &Api) -> String {
    let response = api.get("/metrics", &api.read).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// The refusals `metrics` counts for `queue` and `limit` (0 when none).
fn refused(metrics: &str, queue: &str, limit: &str) -> f64 {
    let lines = metrics.lines().map(|line| Ok(line.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    scrape
        .samples
        .iter()
        .find(|sample| {
            sample.metric == "jobwire_api_enqueues_refused_total"
                && sample.labels.get("queue") == Some(queue)
                && sample.labels.get("limit") == Some(limit)
        })
        .map_or(0.0, |sample| match sample.value {
            prometheus_parse::Value::Counter(value) | prometheus_parse::Value::Untyped(value) => {
                value
            }
            ref other => panic!("not a counter: {other:?}"),
        })
}
