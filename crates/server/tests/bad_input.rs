//! Bad input over HTTP: every malformed body, field, path, query, header and
//! token gets its 4xx and its code, never a 500, and nothing is written.

mod common;

use common::{Api, error_code, parts};
use serde_json::json;
use sqlx::PgPool;

#[derive(Clone, Copy)]
enum Token {
    None,
    Read,
    Write,
    Admin,
}

struct Case {
    name: &'static str,
    method: &'static str,
    path: String,
    token: Token,
    /// An Authorization header to send as is (instead of `token`).
    authorization: Option<String>,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
    /// The field the error must name, for INVALID_FIELD.
    field: Option<&'static str>,
    /// Other request headers.
    headers: Vec<(&'static str, &'static str)>,
}

fn case(name: &'static str, status: u16, code: &'static str) -> Case {
    Case {
        name,
        method: "POST",
        path: "/jobs".into(),
        token: Token::Write,
        authorization: None,
        content_type: Some("application/json"),
        body: b"{\"type\": \"send_email\"}".to_vec(),
        status,
        code,
        field: None,
        headers: Vec::new(),
    }
}

impl Case {
    fn json(mut self, body: serde_json::Value) -> Self {
        self.body = serde_json::to_vec(&body).unwrap();
        self
    }
    fn raw(mut self, body: &[u8]) -> Self {
        self.body = body.to_vec();
        self
    }
    fn field(mut self, field: &'static str) -> Self {
        self.field = Some(field);
        self
    }
    fn at(mut self, method: &'static str, path: impl Into<String>) -> Self {
        self.method = method;
        self.path = path.into();
        self
    }
    fn token(mut self, token: Token) -> Self {
        self.token = token;
        self
    }
    fn authorization(mut self, value: impl Into<String>) -> Self {
        self.authorization = Some(value.into());
        self
    }
    fn content_type(mut self, content_type: Option<&'static str>) -> Self {
        self.content_type = content_type;
        self
    }
    fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }
}

fn invalid(name: &'static str, field: &'static str, body: serde_json::Value) -> Case {
    case(name, 400, "INVALID_FIELD").json(body).field(field)
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn bad_input_gets_a_4xx_naming_the_problem_and_writes_nothing(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let limit = jobwire_core::max_payload_bytes(&pool).await.unwrap();
    let right_id_wrong_secret = {
        let mut token = api.read.clone();
        let last = token.pop().unwrap();
        token.push(if last == '0' { '1' } else { '0' });
        token
    };
    let cases = vec![
        // Tokens and scopes.
        case("no token", 401, "UNAUTHENTICATED").token(Token::None),
        case("not a token", 401, "UNAUTHENTICATED").authorization("Bearer hello"),
        case("basic auth", 401, "UNAUTHENTICATED").authorization("Basic dXNlcjpwYXNz"),
        case(
            "a live token and a second Authorization",
            401,
            "UNAUTHENTICATED",
        )
        .header("authorization", "Bearer not-a-token"),
        case("unknown token", 401, "UNAUTHENTICATED").authorization(format!(
            "Bearer jw_{}_{}",
            "0".repeat(16),
            "0".repeat(64)
        )),
        case("right id, wrong secret", 401, "UNAUTHENTICATED")
            .authorization(format!("Bearer {right_id_wrong_secret}")),
        case("read token enqueues", 403, "FORBIDDEN").token(Token::Read),
        case("write token pauses", 403, "FORBIDDEN")
            .at("POST", "/queues/default/pause")
            .token(Token::Write),
        case("read token cancels", 403, "FORBIDDEN")
            .at("POST", format!("/jobs/{}/cancel", uuid::Uuid::now_v7()))
            .token(Token::Read),
        // The body as a whole.
        case("no content type", 415, "UNSUPPORTED_MEDIA_TYPE").content_type(None),
        case("text body", 415, "UNSUPPORTED_MEDIA_TYPE").content_type(Some("text/plain")),
        case("truncated JSON", 400, "MALFORMED_JSON").raw(b"{\"type\": "),
        case("trailing bytes", 400, "MALFORMED_JSON").raw(b"{\"type\": \"a\"} {}"),
        case("not UTF-8", 400, "MALFORMED_JSON").raw(b"{\"type\": \"\xff\xfe\"}"),
        case("empty body", 400, "MALFORMED_JSON").raw(b""),
        case("array body", 400, "INVALID_FIELD")
            .json(json!([1, 2]))
            .field("body"),
        // serde reads a struct from an array by position: every field here.
        case("array body with every field", 400, "INVALID_FIELD")
            .json(json!(["send_email", {"z": 1}, null, 0, "default", 3, null, null]))
            .field("body"),
        case("string body", 400, "INVALID_FIELD")
            .json(json!("send_email"))
            .field("body"),
        case("truncated array body", 400, "MALFORMED_JSON").raw(b"[\"send_email\", "),
        // A number the API would store rounded (past 64-bit integers and
        // doubles) is refused rather than altered.
        case("a number past a double's precision", 400, "INVALID_FIELD")
            .raw(br#"{"type": "a", "payload": {"n": 123456789012345678901234567890}}"#)
            .field("body"),
        // Fields.
        invalid("missing type", "type", json!({"payload": {}})),
        invalid("empty type", "type", json!({"type": ""})),
        invalid("blank type", "type", json!({"type": "   "})),
        invalid("type is a number", "type", json!({"type": 42})),
        invalid("type too long", "type", json!({"type": "t".repeat(300)})),
        invalid(
            "unknown field",
            "colour",
            json!({"type": "a", "colour": "red"}),
        ),
        invalid(
            "priority above range",
            "priority",
            json!({"type": "a", "priority": 40000}),
        ),
        invalid(
            "negative priority out of range",
            "priority",
            json!({"type": "a", "priority": -40000}),
        ),
        invalid(
            "priority as text",
            "priority",
            json!({"type": "a", "priority": "high"}),
        ),
        invalid(
            "maxAttempts zero",
            "maxAttempts",
            json!({"type": "a", "maxAttempts": 0}),
        ),
        invalid(
            "maxAttempts negative",
            "maxAttempts",
            json!({"type": "a", "maxAttempts": -3}),
        ),
        invalid(
            "runAt without offset",
            "runAt",
            json!({"type": "a", "runAt": "2026-11-01T00:05:00"}),
        ),
        invalid(
            "runAt not a time",
            "runAt",
            json!({"type": "a", "runAt": "tomorrow"}),
        ),
        invalid(
            "runAt in the year 10000",
            "runAt",
            json!({"type": "a", "runAt": "10000-01-01T00:00:00Z"}),
        ),
        invalid(
            "type with an escape sequence",
            "type",
            json!({"type": "a\u{1b}[2J"}),
        ),
        invalid(
            "queue with a newline",
            "queue",
            json!({"type": "a", "queue": "bulk\nurgent"}),
        ),
        invalid(
            "tenant with a bell",
            "tenant",
            json!({"type": "a", "tenant": "acme\u{7}"}),
        ),
        invalid("empty queue", "queue", json!({"type": "a", "queue": ""})),
        invalid(
            "empty idempotencyKey",
            "idempotencyKey",
            json!({"type": "a", "idempotencyKey": ""}),
        ),
        invalid(
            "idempotencyKey too long",
            "idempotencyKey",
            json!({"type": "a", "idempotencyKey": "k".repeat(2000)}),
        ),
        // A control character: refused by name before the database sees it.
        invalid("NUL in the type", "type", json!({"type": "a\u{0}b"})),
        // PostgreSQL cannot store U+0000: refused by field before it is sent.
        invalid(
            "NUL in the payload",
            "payload",
            json!({"type": "a", "payload": {"x": ["ok", {"y\u{0}": 1}]}}),
        ),
        invalid(
            "NUL in the idempotencyKey",
            "idempotencyKey",
            json!({"type": "a", "idempotencyKey": "a\u{0}b"}),
        ),
        case("NUL in a filter", 400, "INVALID_INPUT")
            .at("GET", "/jobs?queue=%00")
            .token(Token::Read),
        case("payload over the limit", 413, "PAYLOAD_TOO_LARGE")
            .json(json!({"type": "a", "payload": {"blob": "x".repeat(limit)}}))
            .field("payload"),
        case("body over the server's limit", 413, "PAYLOAD_TOO_LARGE")
            .json(json!({"type": "a", "payload": {"blob": "x".repeat(2 * 1024 * 1024)}})),
        // Paths and queries.
        case("job id not a UUID", 400, "INVALID_JOB_ID")
            .at("GET", "/jobs/not-a-uuid")
            .token(Token::Read),
        case("cancel id not a UUID", 400, "INVALID_JOB_ID").at("POST", "/jobs/123/cancel"),
        case("limit zero", 400, "INVALID_QUERY")
            .at("GET", "/jobs?limit=0")
            .token(Token::Read)
            .field("limit"),
        case("limit over 500", 400, "INVALID_QUERY")
            .at("GET", "/jobs?limit=501")
            .token(Token::Read)
            .field("limit"),
        case("limit not a number", 400, "INVALID_QUERY")
            .at("GET", "/jobs?limit=ten")
            .token(Token::Read)
            .field("limit"),
        case("unknown state", 400, "INVALID_QUERY")
            .at("GET", "/jobs?state=DONE")
            .token(Token::Read)
            .field("state"),
        case("after not a UUID", 400, "INVALID_QUERY")
            .at("GET", "/jobs?after=xyz")
            .token(Token::Read)
            .field("after"),
        case("unknown query parameter", 400, "INVALID_QUERY")
            .at("GET", "/jobs?colour=red")
            .token(Token::Read)
            .field("colour"),
        case(
            "a parameter on a route that takes none",
            400,
            "INVALID_QUERY",
        )
        .at("GET", "/schedules?limit=1")
        .token(Token::Read)
        .field("limit"),
        case("a parameter on the queue list", 400, "INVALID_QUERY")
            .at("GET", "/queues?paused=true")
            .token(Token::Read)
            .field("paused"),
        // A schedule's name no schedule can have.
        case("a schedule name with a NUL", 400, "INVALID_SCHEDULE_NAME")
            .at("GET", "/schedules/a%00b")
            .token(Token::Read),
        case("a schedule name too long", 400, "INVALID_SCHEDULE_NAME")
            .at("DELETE", format!("/schedules/{}", "a".repeat(129)))
            .token(Token::Admin),
        case("a schedule name with a space", 400, "INVALID_SCHEDULE_NAME")
            .at("POST", "/schedules/nightly%20digest/pause")
            .token(Token::Admin),
        // Dead-letter retry.
        case("retry without a group", 400, "FILTER_REQUIRED")
            .at("POST", "/dead-letter/retry")
            .token(Token::Admin)
            .json(json!({})),
        invalid(
            "retry with a bad since",
            "since",
            json!({"type": "a", "since": "yesterday"}),
        )
        .at("POST", "/dead-letter/retry")
        .token(Token::Admin),
        invalid(
            "retry with an unknown field",
            "limit",
            json!({"type": "a", "limit": 5}),
        )
        .at("POST", "/dead-letter/retry")
        .token(Token::Admin),
        invalid("retry with an empty type", "type", json!({"type": ""}))
            .at("POST", "/dead-letter/retry")
            .token(Token::Admin),
        invalid(
            "retry with since after until",
            "since",
            json!({"type": "a", "since": "2030-01-01T00:00:00Z", "until": "2020-01-01T00:00:00Z"}),
        )
        .at("POST", "/dead-letter/retry")
        .token(Token::Admin),
        case("bad id prefix", 400, "INVALID_QUERY")
            .at("GET", "/jobs?idPrefix=01a2'--")
            .token(Token::Read)
            .field("idPrefix"),
        case("read token replays", 403, "FORBIDDEN")
            .at("POST", format!("/jobs/{}/replay", uuid::Uuid::now_v7()))
            .token(Token::Read),
        // Trace context headers.
        case("traceparent not one", 400, "INVALID_FIELD")
            .header("traceparent", "<script>alert(1)</script>")
            .field("traceparent"),
        case("traceparent in upper case", 400, "INVALID_FIELD")
            .header(
                "traceparent",
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
            )
            .field("traceparent"),
        case("tracestate alone", 400, "INVALID_FIELD")
            .header("tracestate", "vendor=1")
            .field("tracestate"),
        // Routes and methods.
        case("wrong method", 405, "METHOD_NOT_ALLOWED").at("DELETE", "/jobs"),
        case("no such route", 404, "ROUTE_NOT_FOUND")
            .at("GET", "/jobz")
            .token(Token::Read),
        // Without a token, neither says whether the route or method exists.
        case("wrong method, no token", 401, "UNAUTHENTICATED")
            .at("DELETE", "/jobs")
            .token(Token::None),
        case("no such route, no token", 401, "UNAUTHENTICATED")
            .at("GET", "/jobz")
            .token(Token::None),
        case("wrong method, unknown token", 401, "UNAUTHENTICATED")
            .at("PUT", "/openapi.json")
            .authorization(format!("Bearer jw_{}_{}", "0".repeat(16), "0".repeat(64))),
    ];
    assert!(cases.len() >= 30);

    let mut failures = Vec::new();
    for case in &cases {
        let mut request = api
            .client
            .request(case.method.parse().unwrap(), api.url(&case.path))
            .body(case.body.clone());
        if let Some(content_type) = case.content_type {
            request = request.header("content-type", content_type);
        }
        request = match (&case.authorization, case.token) {
            (Some(value), _) => request.header("authorization", value),
            (None, Token::None) => request,
            (None, Token::Read) => request.bearer_auth(&api.read),
            (None, Token::Write) => request.bearer_auth(&api.write),
            (None, Token::Admin) => request.bearer_auth(&api.admin),
        };
        // After the token, so that a case's own Authorization is a second one.
        for (name, value) in &case.headers {
            request = request.header(*name, *value);
        }
        let (status, body) = parts(request.send().await.unwrap()).await;
        let code = if body.is_null() {
            "<no JSON body>"
        } else {
            error_code(&body)
        };
        let field = body["error"]["field"].as_str();
        if status != case.status
            || code != case.code
            || (case.field.is_some() && field != case.field)
        {
            failures.push(format!(
                "{}: expected {} {} {:?}, got {status} {body}",
                case.name, case.status, case.code, case.field
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Nothing was written by any of them.
    for table in ["jobs", "job_outbox", "job_audit", "job_queues"] {
        assert_eq!(
            api.count(&format!("SELECT count(*) FROM {table}")).await,
            0,
            "{table}"
        );
    }
    // A 401 says how to authenticate.
    let response = api.client.get(api.url("/queues")).send().await.unwrap();
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
}

/// A number out of its field's range is refused in the API's words (the
/// range), not in Rust's ("expected i16").
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn an_out_of_range_number_is_refused_with_its_range(pool: PgPool) {
    let api = Api::start(pool).await;
    for (body, range) in [
        (
            json!({"type": "a", "priority": 40000}),
            "from -32768 to 32767",
        ),
        (
            json!({"type": "a", "maxAttempts": 3_000_000_000u64}),
            // The field's own range: a negative count is refused too.
            "from 1 to 2147483647",
        ),
    ] {
        let (status, answer) = parts(
            api.post("/jobs", &api.write)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!((status, error_code(&answer)), (400, "INVALID_FIELD"));
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(range), "{body}: {message}");
        assert!(!message.contains("expected i"), "{body}: {message}");
    }
}

/// A value a check of the schema refuses is the request's to change: 400,
/// not 500. The test adds a check of its own to stand for the checks a
/// request can meet that the server does not make first (a tenant that the
/// database's collation counts as blank, say).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_value_a_schema_check_refuses_is_a_bad_request(pool: PgPool) {
    sqlx::raw_sql(
        "ALTER TABLE jobs ADD CONSTRAINT test_refuses_forbidden CHECK (job_type <> 'forbidden')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let api = Api::start(pool.clone()).await;
    let (status, body) = parts(
        api.post("/jobs", &api.write)
            .json(&json!({"type": "forbidden"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, error_code(&body)),
        (400, "INVALID_INPUT"),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("test_refuses_forbidden"),
        "{body}"
    );
    assert_eq!(
        api.count("SELECT count(*) FROM jobs").await,
        0,
        "nothing written"
    );
}

/// Which methods a route takes is told only to a caller with a live token:
/// axum adds `Allow` to whatever its method fallback answers, so the 401
/// must not carry it, while the 405 given after the token check does.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_methods_of_a_route_are_named_only_after_the_token_check(pool: PgPool) {
    let api = Api::start(pool).await;
    for path in ["/jobs", "/jobz"] {
        let response = api.client.delete(api.url(path)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 401, "{path}");
        assert!(
            response.headers().get("allow").is_none(),
            "{path}: {:?}",
            response.headers()
        );
    }
    let response = api
        .client
        .delete(api.url("/jobs"))
        .bearer_auth(&api.read)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 405);
    let allow = response.headers()["allow"].to_str().unwrap().to_owned();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
}
