//! `POST /jobs` writes the jobs of concurrent requests together: one
//! statement and one commit for every request that arrived while the
//! previous statement was being written (group commit), instead of one each.
//!
//! A request's job is still its own: every request gets its own job and
//! answer, and a job that the database refuses (a payload over the limit, an
//! enqueue limit, a value it cannot store) fails only its own request. When
//! a statement of several jobs is refused, it wrote nothing: its halves are
//! written on their own, the earlier first, down to the jobs refused alone,
//! and each request is answered with its own outcome. A statement that fails
//! otherwise (a lost connection, a deadlock, a timeout) is not repeated,
//! since after a lost connection it may have committed: every request in it
//! gets a 503, as a single request would.
//!
//! Jobs with an idempotency key are written one request at a time: a key
//! that two requests of one statement share would need resolving between
//! them. A job that fails the library's checks is answered before it joins
//! a statement, and a request whose client has gone before its statement
//! is formed is dropped unwritten. When more requests wait than the queue
//! holds, the next ones are written on their own, as before.

use std::collections::VecDeque;
use std::sync::Arc;

use jobwire_core::{EnqueuedJob, Enqueuer, NewJob};
use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};

/// Statements in flight at once: one is written while the next gathers the
/// requests that arrive meanwhile.
const WRITERS: usize = 2;

/// The most jobs one statement writes.
const MOST_PER_STATEMENT: usize = 500;

/// The most request bytes one statement writes (the first job always
/// goes): a few large payloads fill a statement as hundreds of small ones
/// do.
const MOST_BYTES_PER_STATEMENT: usize = 8 * 1024 * 1024;

/// Requests waiting for a writer, at most; beyond it a request is written on
/// its own, through the pool, whose acquire timeout bounds its wait.
const MOST_WAITING: usize = 4 * MOST_PER_STATEMENT;

/// The job written, given back, and how it was written; or why not.
type Answer = jobwire_core::Result<(NewJob, EnqueuedJob)>;
/// A job to write, its request's size in bytes, and where to answer.
type Request = (NewJob, usize, oneshot::Sender<Answer>);

/// The writers of one API server, shared by its handlers. The writer tasks
/// end when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct EnqueueBatches {
    pool: PgPool,
    /// `None` outside a Tokio runtime: every job is written by its own
    /// request.
    requests: Option<mpsc::Sender<Request>>,
}

impl EnqueueBatches {
    pub(crate) fn start(pool: PgPool) -> Self {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return EnqueueBatches {
                pool,
                requests: None,
            };
        };
        let (requests, receiver) = mpsc::channel(MOST_WAITING);
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..WRITERS {
            runtime.spawn(write_statements(pool.clone(), receiver.clone()));
        }
        EnqueueBatches {
            pool,
            requests: Some(requests),
        }
    }

    /// Write `job` (with the jobs of the requests arriving beside it) and
    /// answer as [`Enqueuer::enqueue`] would for it alone, giving the job
    /// back. `bytes`: the request's size, which bounds a statement's.
    pub(crate) async fn enqueue(&self, job: NewJob, bytes: usize) -> Answer {
        Enqueuer.validate(&job)?;
        let requests = match &self.requests {
            Some(requests) if job.dedup_key.is_none() => requests,
            _ => return write_one(&self.pool, job).await,
        };
        let (answer, answered) = oneshot::channel();
        if let Err(refused) = requests.try_send((job, bytes, answer)) {
            // Full (more requests waiting than a few statements hold), or
            // the writers are gone (the runtime is shutting down).
            let (job, _, _) = refused.into_inner();
            return write_one(&self.pool, job).await;
        }
        answered.await.unwrap_or_else(|_| {
            Err(interrupted(
                "the task writing this job stopped before it answered; the job may have been written",
            ))
        })
    }
}

async fn write_one(pool: &PgPool, job: NewJob) -> Answer {
    let enqueued = Enqueuer.enqueue(pool, &job).await?;
    Ok((job, enqueued))
}

/// One writer: take every request waiting (at least one), write their jobs,
/// answer, repeat until the server's last handle is dropped.
async fn write_statements(pool: PgPool, requests: Arc<Mutex<mpsc::Receiver<Request>>>) {
    loop {
        let mut batch = Vec::new();
        {
            // Held while waiting for the first request: the other writer
            // gathers only once this one has taken its batch.
            let mut requests = requests.lock().await;
            let Some(first) = requests.recv().await else {
                return;
            };
            let mut bytes = first.1;
            batch.push(first);
            while batch.len() < MOST_PER_STATEMENT && bytes < MOST_BYTES_PER_STATEMENT {
                match requests.try_recv() {
                    Ok(request) => {
                        bytes += request.1;
                        batch.push(request);
                    }
                    Err(_) => break,
                }
            }
        }
        // A request whose client has gone (a timeout, a dropped connection)
        // is not written: its client may already be retrying it.
        batch.retain(|(_, _, answer)| !answer.is_closed());
        if batch.is_empty() {
            continue;
        }
        write(&pool, batch).await;
    }
}

async fn write(pool: &PgPool, batch: Vec<Request>) {
    // Parts of the batch still to write, in arrival order. A request whose
    // client went away meanwhile no longer waits: its send fails, and its
    // job stays written.
    let mut parts: VecDeque<Vec<(NewJob, oneshot::Sender<Answer>)>> = VecDeque::from([batch
        .into_iter()
        .map(|(job, _, answer)| (job, answer))
        .collect::<Vec<_>>()]);
    while let Some(mut part) = parts.pop_front() {
        if part.len() == 1 {
            let (job, to) = part.pop().expect("one request");
            let _ = to.send(write_one(pool, job).await);
            continue;
        }
        let (jobs, answers): (Vec<NewJob>, Vec<_>) = part.into_iter().unzip();
        match Enqueuer.enqueue_many(pool, &jobs).await {
            Ok(enqueued) => {
                for ((job, to), enqueued) in jobs.into_iter().zip(answers).zip(enqueued) {
                    let _ = to.send(Ok((job, enqueued)));
                }
            }
            Err(err) if refused(&err) => {
                // A verdict on some job of the part, which wrote nothing:
                // each half on its own, the earlier half first, down to the
                // jobs refused alone. One bad job among 500 costs about 18
                // statements, and an enqueue limit still takes the jobs that
                // fit in the order they came.
                let mut earlier: Vec<_> = jobs.into_iter().zip(answers).collect();
                let later = earlier.split_off(earlier.len() / 2);
                parts.push_front(later);
                parts.push_front(earlier);
            }
            Err(err) => {
                tracing::warn!(jobs = jobs.len(), error = %err, "writing a batch of enqueued jobs failed");
                for to in answers {
                    let _ = to.send(Err(for_each_request(&err, jobs.len())));
                }
            }
        }
    }
}

/// What each request of a statement that failed without a verdict on its
/// jobs is answered: a database failure (a lost connection, a deadlock, a
/// timeout) as a database out of reach (503, try again: after a lost
/// connection the job may have been written, as for a single request);
/// anything else, which came with the database's answer in hand (a row that
/// did not decode), as the server's own failure (500).
fn for_each_request(err: &jobwire_core::Error, jobs: usize) -> jobwire_core::Error {
    let message = format!(
        "writing this job together with {} others failed: {err}",
        jobs - 1
    );
    match err {
        jobwire_core::Error::Database(_) => interrupted(&message),
        _ => jobwire_core::Error::Decode(message),
    }
}

/// Whether `err` is the database's verdict on a job of the statement (the
/// statement wrote nothing, and the same jobs without that one would be
/// written): a payload over the limit, an enqueue limit, a check, a value it
/// cannot store. A failure of the database itself (a lost connection, a
/// deadlock, a timeout) is no verdict on any job, and halving the
/// statement would only meet it again.
fn refused(err: &jobwire_core::Error) -> bool {
    use jobwire_core::Error as Core;
    match err {
        Core::InvalidJob { .. }
        | Core::InvalidArgument { .. }
        | Core::PayloadTooLarge { .. }
        | Core::QueueFull { .. }
        | Core::RateLimited { .. }
        | Core::ConstraintViolation { .. } => true,
        // Data exceptions (22) and integrity violations (23).
        Core::Database(sqlx::Error::Database(db)) => db
            .code()
            .is_some_and(|code| code.starts_with("22") || code.starts_with("23")),
        _ => false,
    }
}

/// A job whose statement ended without an answer: the API answers it as a
/// database it cannot use (503, try again).
fn interrupted(message: &str) -> jobwire_core::Error {
    jobwire_core::Error::Database(sqlx::Error::Io(std::io::Error::other(message.to_owned())))
}

#[cfg(test)]
mod tests {
    //! On the test's single-threaded runtime, `join_all` hands every request
    //! to the writers before either runs: they all reach one statement.

    use super::*;
    use std::time::Duration;

    use chrono::{DateTime, Utc};
    use futures::FutureExt;
    use futures::future::join_all;
    use jobwire_core::{Error, QueueLimits};
    use serde_json::json;

    fn job(i: usize) -> NewJob {
        NewJob::new("send_email", json!({ "i": i })).with_queue("mail")
    }

    async fn written(pool: &PgPool) -> Vec<(i64, DateTime<Utc>)> {
        sqlx::query_as(
            "SELECT (payload->>'i')::bigint, created_at FROM jobs WHERE queue = 'mail' ORDER BY 1",
        )
        .fetch_all(pool)
        .await
        .unwrap()
    }

    /// The numbers (`payload.i`) of the jobs written, in order.
    async fn written_numbers(pool: &PgPool) -> Vec<i64> {
        written(pool).await.into_iter().map(|(i, _)| i).collect()
    }

    /// Every request but those in `refused` got its job; each refused one
    /// an error that `expected(i, error)` accepts.
    fn assert_only_refused(
        answers: &[Answer],
        refused: &[usize],
        expected: impl Fn(usize, &Error) -> bool,
    ) {
        for (i, answer) in answers.iter().enumerate() {
            match answer {
                Err(err) if refused.contains(&i) => {
                    assert!(expected(i, err), "request {i}: {err:?}")
                }
                other => assert!(
                    other.is_ok() && !refused.contains(&i),
                    "request {i}: {other:?}"
                ),
            }
        }
    }

    #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
    async fn the_jobs_of_concurrent_requests_are_written_by_one_statement(pool: PgPool) {
        let batches = EnqueueBatches::start(pool.clone());
        let answers = join_all((0..20).map(|i| batches.enqueue(job(i), 100))).await;
        let mut ids = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            let (job, enqueued) = answer.unwrap();
            assert_eq!(
                job.payload,
                json!({ "i": i }),
                "each request gets its own job back"
            );
            assert!(!enqueued.duplicate);
            ids.push(enqueued.job_id);
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 20, "20 jobs, 20 ids");
        let rows = written(&pool).await;
        assert_eq!(
            rows.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..20).collect::<Vec<_>>()
        );
        // One statement, one transaction: one transaction start for all.
        assert!(
            rows.iter().all(|(_, created)| *created == rows[0].1),
            "{rows:?}"
        );
    }

    #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
    async fn a_refused_job_fails_only_its_own_request(pool: PgPool) {
        jobwire_core::set_max_payload_bytes(&pool, 100)
            .await
            .unwrap();
        let batches = EnqueueBatches::start(pool.clone());
        let oversized = NewJob::new("send_email", json!({ "i": 3, "body": "x".repeat(200) }))
            .with_queue("mail");
        let blank_type = NewJob::new("", json!({ "i": 5 })).with_queue("mail");
        let jobs = (0..8).map(|i| match i {
            3 => oversized.clone(),
            5 => blank_type.clone(),
            i => job(i),
        });
        let answers = join_all(jobs.map(|job| batches.enqueue(job, 100))).await;
        assert_only_refused(&answers, &[3, 5], |i, err| match (i, err) {
            (3, Error::PayloadTooLarge { limit, .. }) => *limit == 100,
            (5, Error::InvalidJob { field, .. }) => *field == "job_type",
            _ => false,
        });
        assert_eq!(
            written_numbers(&pool).await,
            [0, 1, 2, 4, 6, 7],
            "every other job written, once"
        );
    }

    #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
    async fn a_value_the_database_cannot_store_fails_only_its_own_request(pool: PgPool) {
        // A value the database refuses and no check before it catches (a
        // trigger of the deployment's own, here): the whole statement
        // fails with a data exception.
        jobwire_test_support::refuse_jobs_noted_refuse(&pool).await;
        let batches = EnqueueBatches::start(pool.clone());
        let jobs = (0..8).map(|i| match i {
            2 | 6 => {
                NewJob::new("send_email", json!({ "i": i, "note": "refuse" })).with_queue("mail")
            }
            i => job(i),
        });
        let answers = join_all(jobs.map(|job| batches.enqueue(job, 100))).await;
        // Each gets the database's own verdict on its job, as a request
        // written alone would, not a 503 for the group.
        assert_only_refused(&answers, &[2, 6], |_, err| {
            matches!(err, Error::Database(sqlx::Error::Database(db))
                if db.code().as_deref() == Some("22023"))
        });
        assert_eq!(
            written_numbers(&pool).await,
            [0, 1, 3, 4, 5, 7],
            "every other job written, once"
        );
    }

    #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
    async fn a_queue_limit_takes_what_fits_in_arrival_order(pool: PgPool) {
        let limits = QueueLimits {
            max_queued: Some(3),
            ..QueueLimits::default()
        };
        jobwire_core::set_queue_limits(&pool, "mail", &limits)
            .await
            .unwrap();
        let batches = EnqueueBatches::start(pool.clone());
        let answers = join_all((0..5).map(|i| batches.enqueue(job(i), 100))).await;
        for (i, answer) in answers.iter().enumerate() {
            if i < 3 {
                assert!(answer.is_ok(), "request {i}: {answer:?}");
            } else {
                assert!(
                    matches!(answer, Err(Error::QueueFull { .. })),
                    "request {i}: {answer:?}"
                );
            }
        }
        assert_eq!(written_numbers(&pool).await, [0, 1, 2]);
    }

    #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
    async fn requests_naming_one_idempotency_key_get_one_job(pool: PgPool) {
        let batches = EnqueueBatches::start(pool.clone());
        let keyed = |i| job(i).with_dedup_key("order-7");
        let answers = join_all((0..4).map(|i| batches.enqueue(keyed(i), 100))).await;
        let enqueued: Vec<EnqueuedJob> = answers.into_iter().map(|a| a.unwrap().1).collect();
        assert!(
            enqueued.iter().all(|e| e.job_id == enqueued[0].job_id),
            "{enqueued:?}"
        );
        assert_eq!(
            enqueued.iter().filter(|e| !e.duplicate).count(),
            1,
            "{enqueued:?}"
        );
        assert_eq!(written(&pool).await.len(), 1);
    }

    #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
    async fn a_request_whose_client_has_gone_is_not_written(pool: PgPool) {
        let batches = EnqueueBatches::start(pool.clone());
        // Polled once (handed to the writers), then dropped, before any
        // writer has run: its client gave up.
        let gone = batches.enqueue(job(0), 100).now_or_never();
        assert!(gone.is_none(), "{gone:?}");
        let (kept, _) = batches.enqueue(job(1), 100).await.unwrap();
        assert_eq!(kept.payload, json!({ "i": 1 }));
        assert_eq!(written_numbers(&pool).await, [1]);
    }

    #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
    async fn a_statement_cut_off_mid_write_is_answered_not_repeated(pool: PgPool) {
        let batches = EnqueueBatches::start(pool.clone());
        // Hold the jobs table, so that the writers' statement waits; then
        // end the writer's session, as a lost connection would.
        let mut holder = pool.begin().await.unwrap();
        sqlx::query("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
            .execute(&mut *holder)
            .await
            .unwrap();
        let requests = tokio::spawn({
            let batches = batches.clone();
            async move { join_all((0..5).map(|i| batches.enqueue(job(i), 100))).await }
        });
        let waiting = loop {
            let pid: Option<i32> = sqlx::query_scalar(
                "SELECT pid FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'
                   AND query LIKE '%jobwire_enqueue_rows%'",
            )
            .fetch_optional(&pool)
            .await
            .unwrap();
            if let Some(pid) = pid {
                break pid;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(waiting)
            .execute(&pool)
            .await
            .unwrap();
        let answers = tokio::time::timeout(Duration::from_secs(30), requests)
            .await
            .expect("answered")
            .unwrap();
        holder.rollback().await.unwrap();
        for answer in &answers {
            assert!(
                matches!(answer, Err(Error::Database(sqlx::Error::Io(_)))),
                "{answer:?}"
            );
        }
        // Not written again behind the lock, once it was released.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(written(&pool).await.is_empty());
    }
}
