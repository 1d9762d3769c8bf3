//! The OpenAPI document: generated from the handlers, served at
//! /openapi.json, checked in as docs/api/openapi.json. This test fails when
//! the checked-in copy is stale (`JOBWIRE_WRITE_OPENAPI=1 cargo test -p
//! jobwire-server --test openapi` rewrites it), and when a route the server
//! answers is missing from the document. Every route but the health
//! checks refuses a query parameter it does not take.

mod common;

use common::{Api, parts};
use serde_json::Value;
use sqlx::PgPool;

const CHECKED_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api/openapi.json");

/// Every route of the API, as (method, path template, a concrete path).
const ROUTES: &[(&str, &str, &str)] = &[
    ("post", "/jobs", "/jobs"),
    ("get", "/jobs", "/jobs"),
    (
        "get",
        "/jobs/{jobId}",
        "/jobs/0193a5b2-0000-7000-8000-000000000000",
    ),
    (
        "post",
        "/jobs/{jobId}/cancel",
        "/jobs/0193a5b2-0000-7000-8000-000000000000/cancel",
    ),
    (
        "post",
        "/jobs/{jobId}/replay",
        "/jobs/0193a5b2-0000-7000-8000-000000000000/replay",
    ),
    ("get", "/dead-letter", "/dead-letter"),
    ("post", "/dead-letter/retry", "/dead-letter/retry"),
    ("get", "/queues", "/queues"),
    ("post", "/queues/{name}/pause", "/queues/default/pause"),
    ("post", "/queues/{name}/resume", "/queues/default/resume"),
    ("get", "/queues/{name}/tenants", "/queues/default/tenants"),
    (
        "put",
        "/queues/{name}/tenant-cap",
        "/queues/default/tenant-cap",
    ),
    (
        "delete",
        "/queues/{name}/tenant-cap",
        "/queues/default/tenant-cap",
    ),
    (
        "put",
        "/queues/{name}/tenants/{tenant}",
        "/queues/default/tenants/acme",
    ),
    (
        "delete",
        "/queues/{name}/tenants/{tenant}",
        "/queues/default/tenants/acme",
    ),
    ("get", "/queues/{name}/limits", "/queues/default/limits"),
    ("put", "/queues/{name}/limits", "/queues/default/limits"),
    ("delete", "/queues/{name}/limits", "/queues/default/limits"),
    (
        "put",
        "/queues/{name}/tenant-limits",
        "/queues/default/tenant-limits",
    ),
    (
        "delete",
        "/queues/{name}/tenant-limits",
        "/queues/default/tenant-limits",
    ),
    ("get", "/schedules", "/schedules"),
    ("put", "/schedules/{name}", "/schedules/nightly"),
    ("get", "/schedules/{name}", "/schedules/nightly"),
    ("delete", "/schedules/{name}", "/schedules/nightly"),
    (
        "post",
        "/schedules/{name}/pause",
        "/schedules/nightly/pause",
    ),
    (
        "post",
        "/schedules/{name}/resume",
        "/schedules/nightly/resume",
    ),
    ("get", "/healthz", "/healthz"),
    ("get", "/readyz", "/readyz"),
    ("get", "/openapi.json", "/openapi.json"),
    ("get", "/metrics", "/metrics"),
];

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_served_document_is_the_checked_in_one_and_lists_every_route(pool: PgPool) {
    let api = Api::start(pool).await;
    let (status, served) = parts(api.get("/openapi.json", &api.read).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let generated = serde_json::to_string_pretty(&jobwire_server::openapi()).unwrap() + "\n";
    assert_eq!(served, serde_json::from_str::<Value>(&generated).unwrap());

    if std::env::var_os("JOBWIRE_WRITE_OPENAPI").is_some() {
        std::fs::write(CHECKED_IN, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(CHECKED_IN).unwrap_or_default();
    assert!(
        checked_in == generated,
        "docs/api/openapi.json is not the document the code generates; rewrite it with \
         JOBWIRE_WRITE_OPENAPI=1 cargo test -p jobwire-server --test openapi"
    );

    // Each route is in the document, and the server answers it (anything
    // but ROUTE_NOT_FOUND / METHOD_NOT_ALLOWED).
    let paths = served["paths"].as_object().unwrap();
    let mut documented = 0;
    for (method, template, concrete) in ROUTES {
        assert!(
            paths.get(*template).and_then(|p| p.get(*method)).is_some(),
            "{method} {template} undocumented"
        );
        let request = api
            .client
            .request(method.to_uppercase().parse().unwrap(), api.url(concrete))
            .bearer_auth(&api.admin);
        let (status, body) = parts(request.send().await.unwrap()).await;
        assert!(
            status != 404 || body["error"]["code"] != "ROUTE_NOT_FOUND",
            "{method} {concrete} not served"
        );
        assert_ne!(status, 405, "{method} {concrete} not served");
    }
    for operations in paths.values() {
        documented += operations.as_object().unwrap().len();
    }
    // Nothing documented that the list above does not serve.
    assert_eq!(documented, ROUTES.len());
}

/// A parameter a route does not take is refused, never ignored: `POST
/// /jobs?delayMs=60000` answered 201 and ran the job at once, and `POST
/// /jobs?queue=critical` enqueued into `default`. Every route of the list
/// above is asked with one parameter none of them takes; only the health
/// checks (probes that may add their own) answer as without it. Nothing
/// is written by any of the refused requests.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn every_route_but_the_health_checks_refuses_a_query_parameter_it_does_not_take(
    pool: PgPool,
) {
    let api = Api::start(pool).await;
    let document = jobwire_server::openapi();
    let document = serde_json::to_value(&document).unwrap();
    let tables = "SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM job_queues) \
                  + (SELECT count(*) FROM job_schedules) + (SELECT count(*) FROM job_tenants) \
                  + (SELECT count(*) FROM job_audit)";
    let rows_before = api.count(tables).await;
    let body = serde_json::json!({ "type": "send_email" });
    for (method, template, concrete) in ROUTES {
        let request = api
            .client
            .request(
                method.to_uppercase().parse().unwrap(),
                api.url(&format!("{concrete}?notAParameter=1")),
            )
            .bearer_auth(&api.admin)
            .json(&body);
        let (status, answer) = parts(request.send().await.unwrap()).await;
        if concrete.ends_with("z") {
            assert_eq!(status, 200, "{method} {concrete}: {answer}");
            continue;
        }
        assert_eq!(status, 400, "{method} {concrete}: {answer}");
        assert_eq!(
            answer["error"]["code"], "INVALID_QUERY",
            "{method} {concrete}"
        );
        assert_eq!(
            answer["error"]["field"], "notAParameter",
            "{method} {concrete}"
        );
        // And the document says so.
        assert!(
            document["paths"][template][method]["responses"]
                .get("400")
                .is_some(),
            "{method} {template}: no 400 in the document"
        );
    }
    assert_eq!(
        api.count(tables).await,
        rows_before,
        "a refused request wrote"
    );
}

/// A payload is any JSON value, as the server takes and shows it (a
/// fuzzer against the document found it said `object`, which a client
/// generated from it would enforce on answers the server gives).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_payload_of_any_json_value_is_taken_shown_and_documented(pool: PgPool) {
    let api = Api::start(pool).await;
    for payload in [
        serde_json::json!("hello"),
        serde_json::json!([1, 2]),
        serde_json::json!(7),
    ] {
        let body = serde_json::json!({ "type": "send_email", "payload": payload });
        let (status, created) = parts(
            api.post("/jobs", &api.write)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{created}");
        let id = created["jobId"].as_str().unwrap().to_owned();
        let (status, shown) = parts(
            api.get(&format!("/jobs/{id}"), &api.read)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(shown["payload"], payload);
    }
    let document = serde_json::to_value(jobwire_server::openapi()).unwrap();
    for schema in [
        "EnqueueRequest",
        "JobView",
        "PutScheduleRequest",
        "ScheduleView",
    ] {
        let payload = &document["components"]["schemas"][schema]["properties"]["payload"];
        assert!(payload.is_object(), "{schema} has no payload");
        assert!(
            payload.get("type").is_none() && payload.get("$ref").is_none(),
            "{schema}.payload is constrained: {payload}"
        );
    }
}

/// What the document promises beyond the routes: every route but the
/// health checks may answer 503 (its token's check reads the database),
/// every route with a JSON body 413 and 415, and the values it lists for a
/// job's state and a schedule's missed runs are the ones the server takes.
#[test]
fn the_document_lists_each_routes_refusals_and_the_servers_own_values() {
    let document = serde_json::to_value(jobwire_server::openapi()).unwrap();
    const WITH_A_BODY: &[(&str, &str)] = &[
        ("post", "/jobs"),
        ("post", "/dead-letter/retry"),
        ("put", "/queues/{name}/tenant-cap"),
        ("put", "/queues/{name}/tenants/{tenant}"),
        ("put", "/queues/{name}/limits"),
        ("put", "/queues/{name}/tenant-limits"),
        ("put", "/schedules/{name}"),
    ];
    for (method, template, _) in ROUTES {
        let responses = &document["paths"][template][method]["responses"];
        if template.ends_with('z') {
            continue;
        }
        assert!(
            responses.get("503").is_some(),
            "{method} {template}: no 503"
        );
        let takes_a_body = WITH_A_BODY.contains(&(*method, *template));
        for status in ["413", "415"] {
            assert_eq!(
                responses.get(status).is_some(),
                takes_a_body,
                "{method} {template}: {status}"
            );
        }
    }

    let state = document["paths"]["/jobs"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|parameter| parameter["name"] == "state")
        .unwrap()["schema"]["enum"]
        .clone();
    let states: Vec<&str> = jobwire_core::JobState::ALL
        .iter()
        .map(|state| state.as_str())
        .collect();
    assert_eq!(state, serde_json::json!(states));
    let missed = &document["components"]["schemas"]["MissedPolicy"]["enum"];
    let policies: Vec<&str> = [
        jobwire_core::MissedRuns::Skip,
        jobwire_core::MissedRuns::Latest,
        jobwire_core::MissedRuns::All,
    ]
    .iter()
    .map(|policy| policy.as_str())
    .collect();
    assert_eq!(*missed, serde_json::json!(policies));
}
