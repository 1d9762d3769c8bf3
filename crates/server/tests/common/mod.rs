//! A real API server on a loopback port over a test database, and tokens of
//! each scope to call it with.

#![allow(dead_code)]

use jobwire_core::Scope;
use jobwire_server::HttpServer;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

pub struct Api {
    pub base: String,
    pub client: reqwest::Client,
    pub pool: PgPool,
    pub read: String,
    pub write: String,
    pub admin: String,
    stop: CancellationToken,
}

impl Api {
    /// Serve the API over `pool` on a free loopback port, with one token of
    /// each scope (named `reader`, `writer`, `admin`).
    pub async fn start(pool: PgPool) -> Api {
        let server = HttpServer::bind("127.0.0.1:0".parse().unwrap(), pool.clone())
            .await
            .unwrap();
        let base = format!("http://{}", server.local_addr().unwrap());
        let stop = CancellationToken::new();
        tokio::spawn(server.run(stop.clone()));
        let token = |name: &'static str, scope| {
            let pool = pool.clone();
            async move {
                jobwire_core::create_api_token(&pool, name, scope)
                    .await
                    .unwrap()
                    .secret
            }
        };
        Api {
            read: token("reader", Scope::Read).await,
            write: token("writer", Scope::Write).await,
            admin: token("admin", Scope::Admin).await,
            base,
            client: reqwest::Client::new(),
            pool,
            stop,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.client.get(self.url(path)).bearer_auth(token)
    }

    pub fn post(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.client.post(self.url(path)).bearer_auth(token)
    }

    pub async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// `GET /queues` with `token` until the server refuses it, at most for a
/// generous ten seconds (a server hears of a revocation on the token
/// channel, in milliseconds): the last answer's status and body.
pub async fn once_refused(api: &Api, token: &str) -> (u16, serde_json::Value) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, body) = parts(api.get("/queues", token).send().await.unwrap()).await;
        if status == 401 || std::time::Instant::now() > deadline {
            return (status, body);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A response's status and JSON body (Null when the body is not JSON).
pub async fn parts(response: reqwest::Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, body)
}

/// The `error.code` of an error envelope, checking the envelope's shape.
pub fn error_code(body: &serde_json::Value) -> &str {
    let error = &body["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "no message in {body}"
    );
    assert!(
        error["requestId"].as_str().is_some_and(|id| !id.is_empty()),
        "no requestId in {body}"
    );
    error["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no code in {body}"))
}
