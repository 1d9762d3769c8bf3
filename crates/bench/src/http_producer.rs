//! The HTTP producer: how fast services enqueue through `POST /jobs`,
//! against the library's own single-job enqueue at the same concurrency.
//! Each run enqueues single jobs on a queue of its own, as fast as its
//! clients go, through a pool of as many connections as it has clients;
//! the HTTP run through the API server, served in this process on a
//! loopback port, with a write token made for the run and revoked after.
//! The jobs are deleted after each run (no worker runs them). Several
//! rounds, alternating which interface goes first, and the median of their
//! ratios: one pair of runs says little on a machine whose speed drifts.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use jobwire_core::{NewJob, Scope};
use jobwire_server::HttpServer;
use serde::Serialize;
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::quantile::percentile;

/// What one producer run measured.
#[derive(Debug, Clone, Serialize)]
pub struct ProducerRun {
    /// `library` (`jobwire_core::enqueue`) or `http` (`POST /jobs`).
    pub interface: &'static str,
    /// Concurrent clients, each enqueuing one job at a time.
    pub clients: usize,
    /// Jobs enqueued.
    pub jobs: usize,
    /// From the first request to the last response.
    pub seconds: f64,
    /// Jobs enqueued per second.
    pub per_second: f64,
    /// One enqueue's latency as its client saw it, in ms.
    pub p50_ms: f64,
    /// The same, 99th percentile.
    pub p99_ms: f64,
}

/// One library run and one HTTP run, one right after the other.
#[derive(Debug, Clone, Serialize)]
pub struct ProducerRound {
    /// The interface that ran first in this round (`library` or `http`):
    /// rounds alternate, so that neither always runs on the warmer
    /// database.
    pub first: &'static str,
    /// The library's single-job enqueue.
    pub library: ProducerRun,
    /// `POST /jobs`.
    pub http: ProducerRun,
    /// HTTP jobs/s over the library's in this round.
    pub http_over_library: f64,
}

/// Both interfaces at one concurrency, over several rounds.
#[derive(Debug, Clone, Serialize)]
pub struct HttpProducerComparison {
    /// Concurrent clients in every run.
    pub clients: usize,
    /// The rounds, in the order they ran.
    pub rounds: Vec<ProducerRound>,
    /// The median of the library runs' jobs/s.
    pub library_per_second: f64,
    /// The median of the HTTP runs' jobs/s.
    pub http_per_second: f64,
    /// The median of the rounds' ratios (the performance issue's target: at
    /// least 0.8). One round's ratio divides two runs taken seconds apart on
    /// a machine whose speed drifts; the median of several says more.
    pub http_over_library: f64,
}

/// For each count in `clients`, `rounds` rounds of `jobs` single jobs
/// through the library and `jobs` through `POST /jobs`, the interface that
/// goes first alternating from round to round, and compare. Each count
/// gets a pool of as many connections, all opened before the first round,
/// so that no run pays for opening them.
pub async fn http_producer(
    pool: &PgPool,
    clients: &[usize],
    jobs: usize,
    rounds: usize,
) -> Result<Vec<HttpProducerComparison>> {
    if jobs == 0 || clients.is_empty() || clients.contains(&0) {
        bail!("an HTTP producer run needs at least one job and one client per run");
    }
    if rounds == 0 {
        bail!("an HTTP producer run needs at least one round");
    }
    let mut comparisons = Vec::with_capacity(clients.len());
    for &count in clients {
        let connections = u32::try_from(count).context("too many clients")?;
        let run_pool = PgPoolOptions::new()
            .max_connections(connections)
            .connect_with(pool.connect_options().as_ref().clone())
            .await?;
        let measured = async {
            open_every_connection(&run_pool, count).await?;
            let mut measured = Vec::with_capacity(rounds);
            for round in 0..rounds {
                measured.push(producer_round(&run_pool, count, jobs, round % 2 == 1).await?);
            }
            anyhow::Ok(measured)
        }
        .await;
        run_pool.close().await;
        comparisons.push(compare(count, measured?));
    }
    Ok(comparisons)
}

/// Hold `count` connections of `pool` at once, which opens them all.
async fn open_every_connection(pool: &PgPool, count: usize) -> Result<()> {
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        held.push(pool.acquire().await?);
    }
    Ok(())
}

async fn producer_round(
    pool: &PgPool,
    clients: usize,
    jobs: usize,
    http_first: bool,
) -> Result<ProducerRound> {
    let (library, http) = if http_first {
        let http = http_run(pool, clients, jobs).await?;
        (library_run(pool, clients, jobs).await?, http)
    } else {
        let library = library_run(pool, clients, jobs).await?;
        (library, http_run(pool, clients, jobs).await?)
    };
    Ok(ProducerRound {
        first: if http_first { "http" } else { "library" },
        http_over_library: http.per_second / library.per_second,
        library,
        http,
    })
}

fn compare(clients: usize, rounds: Vec<ProducerRound>) -> HttpProducerComparison {
    let median = |value: fn(&ProducerRound) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(value).collect();
        percentile(&mut values, 0.50)
    };
    HttpProducerComparison {
        clients,
        library_per_second: median(|round| round.library.per_second),
        http_per_second: median(|round| round.http.per_second),
        http_over_library: median(|round| round.http_over_library),
        rounds,
    }
}

/// A queue of the run's own, so that runs never see each other's jobs.
fn run_queue(interface: &str) -> String {
    format!(
        "bench-{interface}-{}",
        &Uuid::new_v4().simple().to_string()[..8]
    )
}

async fn library_run(pool: &PgPool, clients: usize, jobs: usize) -> Result<ProducerRun> {
    let queue = Arc::new(run_queue("library"));
    let measured = measure(clients, jobs, {
        let (pool, queue) = (pool.clone(), queue.clone());
        move |i| {
            let (pool, queue) = (pool.clone(), queue.clone());
            async move {
                let job = NewJob::new(crate::harness::NOOP_JOB, json!({ "i": i }))
                    .with_queue(queue.as_str());
                jobwire_core::enqueue(&pool, &job).await?;
                Ok(())
            }
        }
    })
    .await;
    let deleted = delete_queue(pool, &queue).await;
    let measured = measured?;
    deleted?;
    Ok(measured.into_run("library"))
}

async fn http_run(pool: &PgPool, clients: usize, jobs: usize) -> Result<ProducerRun> {
    let token_name = format!("bench-http-{}", &Uuid::new_v4().simple().to_string()[..8]);
    let token = jobwire_core::create_api_token(pool, &token_name, Scope::Write).await?;
    let queue = run_queue("http");
    let measured = serve_and_post(pool, clients, jobs, &queue, token.secret).await;
    // Whatever happened, the run's token must not outlive it (unless the
    // process is killed mid-run: then `jobwire token revoke` the name in
    // the error below), and its jobs go too; the first error is reported.
    let revoked = jobwire_core::revoke_api_token(pool, &token_name).await;
    let deleted = delete_queue(pool, &queue).await;
    let measured = measured?;
    match revoked {
        Ok(true) => {}
        Ok(false) => bail!("the run's token {token_name} was no longer live at the end"),
        Err(err) => {
            return Err(err).context(format!("revoking the run's token {token_name}"));
        }
    }
    deleted?;
    Ok(measured.into_run("http"))
}

/// Serve the API on a loopback port for the length of one run of `POST
/// /jobs` requests.
async fn serve_and_post(
    pool: &PgPool,
    clients: usize,
    jobs: usize,
    queue: &str,
    secret: String,
) -> Result<Measured> {
    // Straight to the loopback server, whatever proxy the environment
    // names; a server that stops answering fails the run instead of hanging.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .no_proxy()
        .timeout(std::time::Duration::from_secs(30))
        .build()?;
    let server = HttpServer::bind("127.0.0.1:0".parse()?, pool.clone()).await?;
    let url = format!("http://{}/jobs", server.local_addr()?);
    let stop = CancellationToken::new();
    let serving = tokio::spawn(server.run(stop.clone()));
    let (queue, secret) = (Arc::new(queue.to_owned()), Arc::new(secret));
    let measured = measure(clients, jobs, move |i| {
        let (client, url, queue, secret) =
            (client.clone(), url.clone(), queue.clone(), secret.clone());
        async move {
            let body =
                json!({ "type": crate::harness::NOOP_JOB, "payload": { "i": i }, "queue": *queue });
            let response = client
                .post(url)
                .bearer_auth(secret.as_str())
                .json(&body)
                .send()
                .await?;
            let status = response.status();
            let text = response.text().await?;
            if !status.is_success() {
                bail!("POST /jobs answered {status}: {text}");
            }
            Ok(())
        }
    })
    .await;
    stop.cancel();
    serving.await.context("the API server task failed")??;
    measured
}

async fn delete_queue(pool: &PgPool, queue: &str) -> Result<()> {
    sqlx::query("DELETE FROM jobs WHERE queue = $1")
        .bind(queue)
        .execute(pool)
        .await?;
    Ok(())
}

/// Latencies and wall time of one run.
struct Measured {
    clients: usize,
    latencies_ms: Vec<f64>,
    seconds: f64,
}

impl Measured {
    fn into_run(mut self, interface: &'static str) -> ProducerRun {
        let jobs = self.latencies_ms.len();
        ProducerRun {
            interface,
            clients: self.clients,
            jobs,
            seconds: self.seconds,
            per_second: jobs as f64 / self.seconds,
            p50_ms: percentile(&mut self.latencies_ms, 0.50),
            p99_ms: percentile(&mut self.latencies_ms, 0.99),
        }
    }
}

/// Run `enqueue(i)` for i in 0..jobs from `clients` tasks, each one call at
/// a time. The first error ends the run: the other clients stop after the
/// call they are in, and every client has stopped when this returns (so no
/// enqueue lands after the caller's clean-up).
async fn measure<F, Fut>(clients: usize, jobs: usize, enqueue: F) -> Result<Measured>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let started = Instant::now();
    let failed = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let (enqueue, failed) = (enqueue.clone(), failed.clone());
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            for i in (client..jobs).step_by(clients) {
                if failed.is_cancelled() {
                    break;
                }
                let sent = Instant::now();
                if let Err(err) = enqueue(i).await {
                    failed.cancel();
                    return Err(err);
                }
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies_ms = Vec::with_capacity(jobs);
    let mut first_error = None;
    while let Some(done) = tasks.join_next().await {
        match done.map_err(anyhow::Error::from).and_then(|client| client) {
            Ok(latencies) => latencies_ms.extend(latencies),
            Err(err) => {
                failed.cancel();
                first_error.get_or_insert(err);
            }
        }
    }
    if let Some(err) = first_error {
        return Err(err);
    }
    Ok(Measured {
        clients,
        latencies_ms,
        seconds: started.elapsed().as_secs_f64(),
    })
}
