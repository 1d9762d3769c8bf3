//! The dashboard over a real socket without a browser: sessions and their
//! cookies, and bad input of every kind answered with a readable page and
//! the right status, never a 500, with nothing written.

mod common;

use common::Api;
use jobwire_core::{JobState, NewJob};
use reqwest::StatusCode;
use reqwest::header::{ALLOW, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The value of cookie `name` among a response's Set-Cookie headers.
fn set_cookie<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with(&format!("{name}=")))
}

fn cookie_value(header: &str) -> String {
    header
        .split(';')
        .next()
        .unwrap()
        .split_once('=')
        .unwrap()
        .1
        .to_owned()
}

/// A form body, as a browser encodes it.
fn form(fields: &[(&str, &str)]) -> String {
    let mut body = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in fields {
        body.append_pair(name, value);
    }
    body.finish()
}

fn hidden_csrf(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field");
    html[at + 19..at + 19 + 64].to_owned()
}

/// `path` as the browser holding `cookie` asks for it.
async fn get_with(api: &Api, path: &str, cookie: &str) -> reqwest::Response {
    client()
        .get(api.url(path))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap()
}

/// The login form's CSRF cookie and field.
async fn login_form(api: &Api) -> String {
    let response = client().get(api.url("/ui/login")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let cookie = cookie_value(set_cookie(&response, "jobwire_login").unwrap());
    let html = response.text().await.unwrap();
    assert_eq!(hidden_csrf(&html), cookie);
    cookie
}

/// A logged-in session: (the cookie header to send, the forms' CSRF token).
async fn log_in(api: &Api, token: &str) -> (String, String) {
    let login = login_form(api).await;
    let response = client()
        .post(api.url("/ui/login"))
        .header(COOKIE, format!("jobwire_login={login}"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[("token", token), ("csrf", &login)]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers()[LOCATION], "/ui");
    let header = set_cookie(&response, "jobwire_session").unwrap().to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(header.contains(flag), "{header} lacks {flag}");
    }
    // Reached over plain HTTP: a Secure cookie would never come back.
    assert!(!header.contains("Secure"), "{header}");
    let cookie = format!("jobwire_session={}", cookie_value(&header));
    // The login page, for someone logged in, leads to the overview.
    let again = get_with(api, "/ui/login", &cookie).await;
    assert_eq!(again.status(), StatusCode::SEE_OTHER);
    assert_eq!(again.headers()[LOCATION], "/ui");
    // The overview typed with a trailing slash leads to the overview.
    let slash = get_with(api, "/ui/", &cookie).await;
    assert_eq!(slash.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(slash.headers()[LOCATION], "/ui");
    let page = get_with(api, "/ui", &cookie).await;
    assert_eq!(page.status(), 200);
    let csrf = hidden_csrf(&page.text().await.unwrap());
    (cookie, csrf)
}

/// An HTML error page with `status` naming `code`.
async fn assert_page(response: reqwest::Response, status: u16, code: &str) {
    assert_eq!(response.status().as_u16(), status, "{:?}", response.url());
    assert!(
        response.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html"),
        "not a page"
    );
    let html = response.text().await.unwrap();
    assert!(
        html.contains(&format!("{status} {code}")),
        "{code} missing: {html}"
    );
    assert!(html.contains("Request id"), "{html}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn sessions_are_stored_hashed_and_end_with_logout_or_the_token(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    // No cookie, a malformed one, an unknown one: the login form, also for
    // a page that does not exist and a form's address opened as a page
    // (which pages exist is told only after the login).
    for cookie in [
        None,
        Some("jobwire_session=zz"),
        Some(&*format!("jobwire_session={}", "ab".repeat(32))),
    ] {
        for path in ["/ui/jobs", "/ui/no-such-page", "/ui/queues/pause"] {
            let mut request = client().get(api.url(path));
            if let Some(cookie) = cookie {
                request = request.header(COOKIE, cookie);
            }
            let response = request.send().await.unwrap();
            assert_eq!(
                response.status(),
                StatusCode::SEE_OTHER,
                "{path} {cookie:?}"
            );
            assert_eq!(response.headers()[LOCATION], "/ui/login", "{path}");
            // Nor does axum's `Allow` name the form's method.
            assert!(response.headers().get(ALLOW).is_none(), "{path}");
        }
    }

    let (cookie, csrf) = log_in(&api, &api.read).await;
    let secret = cookie.trim_start_matches("jobwire_session=");
    let stored: Vec<u8> = sqlx::query_scalar("SELECT session_sha256 FROM job_ui_sessions")
        .fetch_one(&pool)
        .await
        .unwrap();
    use sha2::Digest;
    assert_eq!(
        stored,
        sha2::Sha256::digest(secret.as_bytes()).to_vec(),
        "only the hash is kept"
    );

    // Security headers on every page.
    let page = get_with(&api, "/ui/queues", &cookie).await;
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(page.headers()["x-frame-options"], "DENY");

    // Logging out ends the session in the database.
    let out = client()
        .post(api.url("/ui/logout"))
        .header(COOKIE, &cookie)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[("csrf", &csrf)]))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let after = get_with(&api, "/ui", &cookie).await;
    assert_eq!(
        after.status(),
        StatusCode::SEE_OTHER,
        "the old cookie opens nothing"
    );
    assert_eq!(api.count("SELECT count(*) FROM job_ui_sessions").await, 0);

    // Revoking the token ends its sessions.
    let (cookie, _) = log_in(&api, &api.write).await;
    assert!(
        jobwire_core::revoke_api_token(&pool, "writer")
            .await
            .unwrap()
    );
    let after = get_with(&api, "/ui", &cookie).await;
    assert_eq!(after.status(), StatusCode::SEE_OTHER);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn behind_a_tls_proxy_the_cookies_are_secure(pool: PgPool) {
    let api = Api::start(pool).await;
    for (header, value) in [
        ("x-forwarded-proto", "https"),
        ("forwarded", "for=192.0.2.60;proto=https"),
    ] {
        let page = client()
            .get(api.url("/ui/login"))
            .header(header, value)
            .send()
            .await
            .unwrap();
        let login_cookie = set_cookie(&page, "jobwire_login").unwrap().to_owned();
        assert!(login_cookie.contains("Secure"), "{header}: {login_cookie}");
        let login = cookie_value(&login_cookie);
        let response = client()
            .post(api.url("/ui/login"))
            .header(header, value)
            .header(COOKIE, format!("jobwire_login={login}"))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form(&[("token", &api.read), ("csrf", &login)]))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{header}");
        let session = set_cookie(&response, "jobwire_session").unwrap();
        for flag in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/ui"] {
            assert!(session.contains(flag), "{header}: {session} lacks {flag}");
        }
    }
    // A proxy that says the browser came over plain HTTP: not Secure.
    let page = client()
        .get(api.url("/ui/login"))
        .header("x-forwarded-proto", "http")
        .send()
        .await
        .unwrap();
    let login_cookie = set_cookie(&page, "jobwire_login").unwrap();
    assert!(!login_cookie.contains("Secure"), "{login_cookie}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_bad_login_gets_a_clear_answer_and_no_session(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let login = login_form(&api).await;
    let post = |body: String, cookie: Option<String>| {
        let mut request = client()
            .post(api.url("/ui/login"))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body);
        if let Some(cookie) = cookie {
            request = request.header(COOKIE, cookie);
        }
        request.send()
    };
    let with_cookie = Some(format!("jobwire_login={login}"));
    // A wrong, a malformed or an empty token: 401 and the form again.
    for token in [
        "jw_0123456789abcdef_".to_owned() + &"ab".repeat(32),
        "hello".into(),
        String::new(),
    ] {
        let response = post(format!("token={token}&csrf={login}"), with_cookie.clone())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{token}");
        assert!(
            response
                .text()
                .await
                .unwrap()
                .contains("not a live API token")
        );
    }
    // Without the login CSRF cookie, or a field that does not match it.
    let response = post(format!("token={}&csrf={login}", api.read), None)
        .await
        .unwrap();
    assert_page(response, 403, "CSRF_REJECTED").await;
    let response = post(
        format!("token={}&csrf={}", api.read, "cd".repeat(32)),
        with_cookie.clone(),
    )
    .await
    .unwrap();
    assert_page(response, 403, "CSRF_REJECTED").await;
    // Not a form; an unknown field.
    let response = client()
        .post(api.url("/ui/login"))
        .header(COOKIE, with_cookie.clone().unwrap())
        .json(&json!({"token": api.read}))
        .send()
        .await
        .unwrap();
    assert_page(response, 400, "INVALID_FORM").await;
    let response = post(
        format!("token={}&csrf={login}&admin=1", api.read),
        with_cookie,
    )
    .await
    .unwrap();
    assert_page(response, 400, "INVALID_FORM").await;
    assert_eq!(api.count("SELECT count(*) FROM job_ui_sessions").await, 0);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn bad_input_on_pages_and_forms_is_a_clear_error_and_writes_nothing(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let (cookie, csrf) = log_in(&api, &api.admin).await;
    let finished = jobwire_core::enqueue(&pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .job_id;
    sqlx::query("UPDATE jobs SET state = 'CANCELLED', finished_at = now() WHERE job_id = $1")
        .bind(finished)
        .execute(&pool)
        .await
        .unwrap();
    let queued = jobwire_core::enqueue(&pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .job_id;
    let get = |path: String| client().get(api.url(&path)).header(COOKIE, &cookie).send();
    let post = |path: String, body: String| {
        client()
            .post(api.url(&path))
            .header(COOKIE, &cookie)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    for (path, status, code) in [
        ("/ui/jobs/not-a-uuid".to_owned(), 400, "INVALID_JOB_ID"),
        (format!("/ui/jobs/{}", Uuid::now_v7()), 404, "JOB_NOT_FOUND"),
        ("/ui/jobs?state=LOST".to_owned(), 400, "INVALID_QUERY"),
        ("/ui/jobs?after=yesterday".to_owned(), 400, "INVALID_QUERY"),
        ("/ui/jobs?id=xyz".to_owned(), 400, "INVALID_QUERY"),
        ("/ui/jobs?bogus=1".to_owned(), 400, "INVALID_QUERY"),
        // White space only names no queue, type or tenant (an empty field
        // is no filter at all).
        ("/ui/jobs?queue=%20".to_owned(), 400, "INVALID_QUERY"),
        ("/ui/jobs?type=%C2%A0".to_owned(), 400, "INVALID_QUERY"),
        ("/ui/jobs?tenant=%20%09".to_owned(), 400, "INVALID_QUERY"),
        ("/ui/tenants?queue=%20".to_owned(), 400, "INVALID_QUERY"),
        ("/ui/tenants?queue=a%00b".to_owned(), 400, "INVALID_QUERY"),
        ("/ui/tenants?bogus=1".to_owned(), 400, "INVALID_QUERY"),
        (
            "/ui/dead-letters/retry?type=x".to_owned(),
            400,
            "FILTER_REQUIRED",
        ),
        (
            "/ui/dead-letters?requeued=lots".to_owned(),
            400,
            "INVALID_QUERY",
        ),
        ("/ui/no-such-page".to_owned(), 404, "PAGE_NOT_FOUND"),
        // A form's address opened as a page: a page saying so.
        ("/ui/queues/pause".to_owned(), 405, "METHOD_NOT_ALLOWED"),
        (format!("/ui/jobs/{}", "%00"), 400, "INVALID_JOB_ID"),
    ] {
        assert_page(get(path).await.unwrap(), status, code).await;
    }
    let with_csrf = |rest: &str| format!("csrf={csrf}{rest}");
    for (path, body, status, code) in [
        (
            format!("/ui/jobs/{finished}/cancel"),
            with_csrf(""),
            409,
            "JOB_FINISHED",
        ),
        (
            format!("/ui/jobs/{queued}/replay"),
            with_csrf(""),
            409,
            "WRONG_STATE",
        ),
        (
            format!("/ui/jobs/{}/replay", Uuid::now_v7()),
            with_csrf(""),
            404,
            "JOB_NOT_FOUND",
        ),
        (
            format!("/ui/jobs/{queued}/cancel"),
            with_csrf("&force=1"),
            400,
            "INVALID_FORM",
        ),
        (
            format!("/ui/jobs/{queued}/cancel"),
            with_csrf(&format!("&csrf={csrf}")),
            400,
            "INVALID_FORM",
        ),
        (
            "/ui/dead-letters/retry".to_owned(),
            with_csrf("&type=noop"),
            400,
            "FILTER_REQUIRED",
        ),
        (
            "/ui/dead-letters/retry".to_owned(),
            with_csrf("&type=noop&errorCode=X&until=soon"),
            400,
            "INVALID_FORM",
        ),
        (
            "/ui/queues/pause".to_owned(),
            with_csrf(&format!("&queue={}", "q".repeat(300))),
            400,
            "INVALID_QUEUE",
        ),
        (
            "/ui/queues/pause".to_owned(),
            with_csrf(""),
            400,
            "INVALID_QUEUE",
        ),
        (
            "/ui/tenants/cap".to_owned(),
            with_csrf("&queue=imports&tenant=acme&max_running="),
            400,
            "INVALID_FIELD",
        ),
        (
            "/ui/tenants/cap".to_owned(),
            with_csrf("&queue=imports&tenant=acme&max_running=0"),
            400,
            "INVALID_FIELD",
        ),
        (
            "/ui/tenants/cap".to_owned(),
            with_csrf("&queue=imports&tenant=acme&max_running=three"),
            400,
            "INVALID_FIELD",
        ),
        (
            "/ui/tenants/cap".to_owned(),
            with_csrf("&queue=imports&tenant=acme&max_running=1000000001"),
            400,
            "INVALID_FIELD",
        ),
        (
            "/ui/tenants/cap".to_owned(),
            with_csrf("&queue=imports&tenant=%20&max_running=3"),
            400,
            "INVALID_FIELD",
        ),
        (
            "/ui/tenants/cap".to_owned(),
            with_csrf("&queue=&tenant=acme&max_running=3"),
            400,
            "INVALID_QUEUE",
        ),
        (
            "/ui/tenants/cap".to_owned(),
            with_csrf("&queue=imports&tenant=acme&max_running=3&max_queued=9"),
            400,
            "INVALID_FORM",
        ),
        (
            "/ui/schedules/nope/pause".to_owned(),
            with_csrf(""),
            404,
            "SCHEDULE_NOT_FOUND",
        ),
        (
            format!("/ui/jobs/{queued}/cancel"),
            String::new(),
            403,
            "CSRF_REJECTED",
        ),
    ] {
        assert_page(post(path.clone(), body).await.unwrap(), status, code).await;
    }
    // A body over the limit is refused before anything reads it.
    let huge = format!(
        "csrf={csrf}&errorCode=E&type={}",
        "x".repeat(2 * 1024 * 1024)
    );
    let response = post("/ui/dead-letters/retry".into(), huge).await.unwrap();
    assert_page(response, 413, "PAYLOAD_TOO_LARGE").await;

    assert_eq!(
        jobwire_core::job_status(&pool, queued).await.unwrap().state,
        JobState::Queued
    );
    assert_eq!(
        api.count("SELECT count(*) FROM job_audit").await,
        0,
        "nothing audited"
    );
    assert_eq!(
        api.count("SELECT count(*) FROM job_queues").await,
        0,
        "no queue paused, no cap set"
    );
    assert_eq!(
        api.count("SELECT count(*) FROM job_tenants").await,
        0,
        "no tenant's cap set"
    );
}

/// A queue named `.` or `..` is paused and resumed from its row like any
/// other. Its name was a path segment of the form's address, which the
/// browser resolved away (`/ui/queues/%2E%2E/pause` became `/ui/pause`).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn queues_named_like_path_segments_are_paused_from_their_row(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    for queue in [".", "..", "a/b?c#d"] {
        jobwire_core::enqueue(&pool, &NewJob::new("noop", json!({})).with_queue(queue))
            .await
            .unwrap();
    }
    let (cookie, csrf) = log_in(&api, &api.admin).await;
    let page = get_with(&api, "/ui/queues", &cookie)
        .await
        .text()
        .await
        .unwrap();
    for queue in [".", ".."] {
        assert!(
            page.contains(&format!(
                r#"<input type="hidden" name="queue" value="{queue}">"#
            )),
            "{queue}'s row names it in its form: {page}"
        );
    }
    for (queue, encoded) in [(".", "."), ("..", ".."), ("a/b?c#d", "a%2Fb%3Fc%23d")] {
        for (action, paused) in [("pause", true), ("resume", false)] {
            let response = client()
                .post(api.url(&format!("/ui/queues/{action}")))
                .header(COOKIE, &cookie)
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(format!("csrf={csrf}&queue={encoded}"))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::SEE_OTHER, "{action} {queue}");
            let now: bool = sqlx::query_scalar("SELECT paused FROM job_queues WHERE queue = $1")
                .bind(queue)
                .fetch_one(&pool)
                .await
                .unwrap();
            assert_eq!(now, paused, "{action} {queue}");
        }
    }
}

/// The jobs list filtered by tenant shows that tenant's jobs, each saying
/// whose it is, and its pages keep the filter.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_jobs_list_filters_by_tenant(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let mut acme = Vec::new();
    for tenant in ["acme", "globex", "acme"] {
        let job = NewJob::new("noop", json!({})).with_tenant(tenant);
        let id = jobwire_core::enqueue(&pool, &job).await.unwrap().job_id;
        if tenant == "acme" {
            acme.push(id.to_string());
        }
    }
    let (cookie, _) = log_in(&api, &api.read).await;
    let page = get_with(&api, "/ui/jobs?tenant=acme", &cookie)
        .await
        .text()
        .await
        .unwrap();
    let listed = page.matches("class=\"mono job-id\"").count();
    assert_eq!(listed, 2, "{page}");
    assert!(acme.iter().all(|id| page.contains(id.as_str())), "{page}");
    assert!(
        page.contains("for acme") && !page.contains("for globex"),
        "{page}"
    );
    assert!(
        page.contains(r#"<input id="f-tenant" name="tenant" value="acme">"#),
        "{page}"
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_token_bound_to_a_tenant_cannot_open_the_dashboard(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    let acme = jobwire_core::create_tenant_api_token(
        &pool,
        "acme-viewer",
        jobwire_core::Scope::Read,
        Some("acme"),
    )
    .await
    .unwrap()
    .secret;
    let login = login_form(&api).await;
    let response = client()
        .post(api.url("/ui/login"))
        .header(COOKIE, format!("jobwire_login={login}"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[("token", &acme), ("csrf", &login)]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(set_cookie(&response, "jobwire_session").is_none());
    let html = response.text().await.unwrap();
    assert!(html.contains("bound to tenant"), "{html}");
    let sessions: i64 = sqlx::query_scalar("SELECT count(*) FROM job_ui_sessions")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(sessions, 0);
}

/// A form's address opened as a page, logged in: a page saying 405, with
/// the method it takes and every page's security headers.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_form_address_opened_as_a_page_is_a_page_saying_so(pool: PgPool) {
    let api = Api::start(pool).await;
    let (cookie, _) = log_in(&api, &api.read).await;
    let response = get_with(&api, "/ui/queues/pause", &cookie).await;
    assert_eq!(response.headers()[ALLOW], "POST");
    for header in [
        "content-security-policy",
        "x-frame-options",
        "cache-control",
    ] {
        assert!(
            response.headers().contains_key(header),
            "{header}: {:?}",
            response.headers()
        );
    }
    assert_page(response, 405, "METHOD_NOT_ALLOWED").await;
}

/// On a broker queue, a waiting job handed a freed slot holds it before it
/// runs: the Tenants page shows it as starting, a tenant holding every slot
/// of its cap that way as at its cap, and as held back only with a job
/// waiting for a slot behind them.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_tenants_page_counts_jobs_handed_a_slot_as_starting(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    jobwire_core::set_queue_dispatch(
        &pool,
        "b",
        &jobwire_core::Dispatch::Broker { topic: "t".into() },
    )
    .await
    .unwrap();
    jobwire_core::set_tenant_cap(&pool, "b", None, Some(2))
        .await
        .unwrap();
    // The enqueue hands each tenant's two slots to its first two jobs:
    // acme's third waits for a slot, globex has none waiting beyond them.
    for (tenant, jobs) in [("acme", 3), ("globex", 2)] {
        let jobs: Vec<NewJob> = (0..jobs)
            .map(|i| {
                NewJob::new("noop", json!({ "i": i }))
                    .with_queue("b")
                    .with_tenant(tenant)
            })
            .collect();
        jobwire_core::enqueue_many(&pool, &jobs).await.unwrap();
    }

    let (cookie, _) = log_in(&api, &api.read).await;
    let page = get_with(&api, "/ui/tenants?queue=b", &cookie)
        .await
        .text()
        .await
        .unwrap();
    let row = |tenant: &str| {
        let at = page
            .find(&format!("data-tenant=\"{tenant}\""))
            .expect("the tenant's row");
        let row = &page[at..];
        row[..row.find("</tr>").unwrap()].to_owned()
    };
    let acme = row("acme");
    assert!(acme.contains("0 of 2"), "{acme}");
    assert!(acme.contains("2 starting"), "{acme}");
    assert!(acme.contains("held back"), "{acme}");
    let globex = row("globex");
    assert!(globex.contains("2 starting"), "{globex}");
    assert!(
        globex.contains("at cap") && !globex.contains("held back"),
        "{globex}"
    );
}
