//! `/metrics` answers through a database outage, over a real socket: a
//! worker's metrics server reaches PostgreSQL through a proxy the test
//! first stalls (every connection, open or new, hangs) and then switches
//! off. A
//! token the database confirmed before the outage still opens `/metrics`
//! once the server's kept copy has expired (the counters a scrape then
//! shows are what explain the outage); a token never confirmed, or a
//! confirmed token's id with another secret, gets the outage's 503, and so
//! does `/readyz`.

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
    // A pool that waits a minute for a connection, longer than a scrape
    // waits for its answer: the check must not wait as long.
    let through_proxy = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(60))
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
            // Prometheus's default scrape timeout is 10 s.
            client
                .get(url)
                .bearer_auth(token)
                .timeout(Duration::from_secs(8))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(scrape(scraper.clone()).await, 200, "before the outage");

    // The network under every open connection dies without closing them
    // (the listener's too), and a new connection hangs in its handshake.
    // Past the ten seconds a server trusts its kept copy of a token without
    // asking, a check goes to the database and hangs (the pool would wait
    // a minute for a connection).
    proxy.hang_new();
    proxy.stall_live();
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(
        scrape(scraper.clone()).await,
        200,
        "a token confirmed before the outage reads the metrics while a check hangs"
    );

    // The database refuses every connection.
    proxy.set_up(false);
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
    // The confirmed token's id with another secret is no confirmed token.
    let (id, _) = scraper.rsplit_once('_').unwrap();
    assert_eq!(scrape(format!("{id}_{}", "0".repeat(64))).await, 503);
    assert_eq!(scrape("jw_made_up.secret".into()).await, 401);

    proxy.set_up(true);
    stop.cancel();
}
