//! `/metrics` answers through a database outage, over a real socket: a
//! worker's metrics server reaches PostgreSQL through a proxy the test
//! switches off. A token the database confirmed before the outage still
//! opens `/metrics` once the server's kept copy has expired (the counters a
//! scrape then shows are what explain the outage); a token never confirmed
//! gets the outage's 503, and so does `/readyz`.

use std::time::Duration;

use jobwire_core::Scope;
use jobwire_server::HttpServer;
use jobwire_test_support::FlakyProxy;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_confirmed_token_reads_metrics_while_the_database_is_away(pool: PgPool) {
    let options = pool.connect_options();
    let upstream = format!("{}:{}", options.get_host(), options.get_port());
    let proxy = FlakyProxy::start(&upstream, true).await.unwrap();
    let through_proxy = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(2))
        .connect_with(
            options
                .as_ref()
                .clone()
                .host("127.0.0.1")
                .port(proxy.addr.port()),
        )
        .await
        .unwrap();
    let token = |name: &'static str| {
        let pool = pool.clone();
        async move {
            jobwire_core::create_api_token(&pool, name, Scope::Read)
                .await
                .unwrap()
                .secret
        }
    };
    let (scraper, newcomer) = (token("prometheus").await, token("newcomer").await);
    let server = HttpServer::bind_metrics("127.0.0.1:0".parse().unwrap(), through_proxy)
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(server.run(stop.clone()));
    let client = reqwest::Client::new();
    let scrape = |token: String| {
        let (client, url) = (client.clone(), format!("{base}/metrics"));
        async move {
            client
                .get(url)
                .bearer_auth(token)
                .timeout(Duration::from_secs(30))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(scrape(scraper.clone()).await, 200, "before the outage");

    proxy.set_up(false);
    // Past the ten seconds a server trusts its kept copy of a token without
    // asking: from here a check goes to the database, which is away.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let ready = client
        .get(format!("{base}/readyz"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503, "the database is away");
    assert_eq!(
        scrape(scraper.clone()).await,
        200,
        "a token confirmed before the outage reads the metrics"
    );
    assert_eq!(
        scrape(newcomer).await,
        503,
        "a token never confirmed gets the outage's answer"
    );
    assert_eq!(scrape("jw_made_up.secret".into()).await, 401);

    proxy.set_up(true);
    stop.cancel();
}
