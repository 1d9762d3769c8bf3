//! The API server keeps the tokens it has checked and trusts them only
//! while it hears changes on the token channel: over real sockets, against
//! a real PostgreSQL whose connections the tests cut.

mod common;

use std::time::{Duration, Instant};

use common::{Api, error_code, once_refused, parts};
use jobwire_core::Scope;
use jobwire_server::HttpServer;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;

/// The server's LISTEN connection on the token channel, if it has one now
/// (`role`: only that role's connections).
async fn token_listener(pool: &PgPool, role: Option<&str>) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
         WHERE datname = current_database() AND query LIKE 'LISTEN %jobwire_api_tokens%'
           AND ($1::text IS NULL OR usename = $1)",
    )
    .bind(role)
    .fetch_optional(pool)
    .await
    .unwrap()
}

/// Wait (at most a generous ten seconds) until the server listens on the
/// token channel, and a moment more for it to act on having started.
async fn until_listening(pool: &PgPool, role: Option<&str>) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = token_listener(pool, role).await {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return pid;
        }
        assert!(Instant::now() < deadline, "the server never listened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn status_with(api: &Api, token: &str) -> u16 {
    parts(api.get("/queues", token).send().await.unwrap())
        .await
        .0
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_checked_token_is_kept_until_the_token_channel_names_it(pool: PgPool) {
    let api = Api::start(pool.clone()).await;
    until_listening(&pool, None).await;
    assert_eq!(status_with(&api, &api.read).await, 200);

    // Revoked with the announcing trigger switched off: the database says
    // revoked, the server still answers from what it kept (so it did not
    // ask the database again)...
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .unwrap();
    let token_id: String = sqlx::query_scalar(
        "UPDATE job_api_tokens SET revoked_at = now() WHERE name = 'reader' RETURNING token_id",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(
        jobwire_core::authenticate_api_token(&pool, &api.read)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(status_with(&api, &api.read).await, 200);

    // ...until the channel names the token, as the trigger does.
    sqlx::query("SELECT pg_notify('jobwire_api_tokens', $1)")
        .bind(&token_id)
        .execute(&pool)
        .await
        .unwrap();
    let (status, body) = once_refused(&api, &api.read).await;
    assert_eq!((status, error_code(&body)), (401, "UNAUTHENTICATED"));
    // Forgetting one token leaves the others working.
    assert_eq!(status_with(&api, &api.write).await, 200);

    // A TRUNCATE is announced too: every kept token is forgotten, and none
    // is left in the table to be found again.
    sqlx::query("TRUNCATE job_api_tokens CASCADE")
        .execute(&pool)
        .await
        .unwrap();
    let (status, _) = once_refused(&api, &api.write).await;
    assert_eq!(status, 401);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_token_revoked_while_the_server_cannot_listen_is_refused(pool: PgPool) {
    // The server connects as a role of its own, so that the test can cut
    // all its connections and keep them from coming back.
    let role = format!("jw_token_cache_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {role} SUPERUSER LOGIN"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let server_pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(1))
        .connect_with(pool.connect_options().as_ref().clone().username(&role))
        .await
        .unwrap();
    let server = HttpServer::bind("127.0.0.1:0".parse().unwrap(), server_pool.clone())
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr().unwrap());
    let stop = CancellationToken::new();
    let served = tokio::spawn(server.run(stop.clone()));
    let token = |name| jobwire_core::create_api_token(&pool, name, Scope::Read);
    let (kept, other) = (
        token("kept").await.unwrap().secret,
        token("other").await.unwrap().secret,
    );
    let client = reqwest::Client::new();
    let status = |token: String| {
        let request = client.get(format!("{base}/queues")).bearer_auth(token);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    until_listening(&pool, Some(&role)).await;
    assert_eq!(status(kept.clone()).await, 200);
    assert_eq!(status(other.clone()).await, 200);

    // Cut every connection of the server and keep them from coming back;
    // revoke meanwhile, when no one hears the announcement.
    let login = |allowed: &str| format!("ALTER ROLE {role} {allowed}");
    sqlx::query(sqlx::AssertSqlSafe(login("NOLOGIN")))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1")
        .bind(&role)
        .execute(&pool)
        .await
        .unwrap();
    // Gone, so that no backend of the server can take the announcement.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE usename = $1")
                .bind(&role)
                .fetch_one(&pool)
                .await
                .unwrap();
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server's connections live on"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(jobwire_core::revoke_api_token(&pool, "kept").await.unwrap());
    // Cut off, the server says the database is unavailable (once it has
    // noticed: its first requests may still find a connection alive).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut cut_off = status(kept.clone()).await;
    while cut_off == 200 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        cut_off = status(kept.clone()).await;
    }
    assert_eq!(cut_off, 503);

    // Listening again, it refuses the revoked token, whose announcement it
    // never heard, and takes the other.
    sqlx::query(sqlx::AssertSqlSafe(login("LOGIN")))
        .execute(&pool)
        .await
        .unwrap();
    until_listening(&pool, Some(&role)).await;
    assert_eq!(status(kept).await, 401);
    assert_eq!(status(other).await, 200);

    stop.cancel();
    served.await.unwrap().unwrap();
    server_pool.close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP ROLE {role}")))
        .execute(&pool)
        .await
        .unwrap();
}
