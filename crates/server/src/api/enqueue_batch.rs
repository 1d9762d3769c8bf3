//! `POST /jobs` writes the jobs of concurrent requests together: one
//! statement and one commit for every request that arrived while the
//! previous statement was being written (group commit), instead of one each.
//!
//! A request's job is still its own: every request gets its own job and
//! answer, and a job that the database refuses (a payload over the limit, an
//! enqueue limit, a value it cannot store) fails only its own request. When
//! a statement of several jobs is refused, each of its jobs is written again
//! on its own, in arrival order, and answered with its own outcome; the
//! refused statement wrote nothing. A statement that fails without an answer
//! from the database (a lost connection) is not repeated, since it may have
//! committed: every request in it gets the error, as a single request would.
//!
//! Jobs with an idempotency key are written one request at a time: a key
//! that two requests of one statement share would need resolving between
//! them.

use std::sync::Arc;

use jobwire_core::{EnqueuedJob, Enqueuer, NewJob};
use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};

/// Statements in flight at once: one is written while the next gathers the
/// requests that arrive meanwhile.
const WRITERS: usize = 2;

/// The most jobs one statement writes.
const MOST_PER_STATEMENT: usize = 500;

/// The job written, given back, and how it was written; or why not.
type Answer = jobwire_core::Result<(NewJob, EnqueuedJob)>;
/// A job to write, and where to answer.
type Request = (NewJob, oneshot::Sender<Answer>);

/// The writers of one API server, shared by its handlers. The writer tasks
/// end when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct EnqueueBatches {
    pool: PgPool,
    /// `None` outside a Tokio runtime: every job is written by its own
    /// request.
    requests: Option<mpsc::UnboundedSender<Request>>,
}

impl EnqueueBatches {
    pub(crate) fn start(pool: PgPool) -> Self {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return EnqueueBatches {
                pool,
                requests: None,
            };
        };
        let (requests, receiver) = mpsc::unbounded_channel();
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
    /// back.
    pub(crate) async fn enqueue(&self, job: NewJob) -> Answer {
        let requests = match &self.requests {
            Some(requests) if job.dedup_key.is_none() => requests,
            _ => return write_one(&self.pool, job).await,
        };
        let (answer, answered) = oneshot::channel();
        if let Err(mpsc::error::SendError((job, _))) = requests.send((job, answer)) {
            // The writers are gone (the runtime is shutting down).
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
async fn write_statements(pool: PgPool, requests: Arc<Mutex<mpsc::UnboundedReceiver<Request>>>) {
    loop {
        let mut batch = Vec::new();
        {
            // Held while waiting for the first request: the other writer
            // gathers only once this one has taken its batch.
            let mut requests = requests.lock().await;
            let Some(first) = requests.recv().await else {
                return;
            };
            batch.push(first);
            while batch.len() < MOST_PER_STATEMENT {
                match requests.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
        }
        write(&pool, batch).await;
    }
}

async fn write(pool: &PgPool, batch: Vec<Request>) {
    let (jobs, answers): (Vec<NewJob>, Vec<oneshot::Sender<Answer>>) = batch.into_iter().unzip();
    // A request whose client went away no longer waits: its send fails, and
    // its job stays written.
    if jobs.len() == 1 {
        for (job, to) in jobs.into_iter().zip(answers) {
            let _ = to.send(write_one(pool, job).await);
        }
        return;
    }
    match Enqueuer.enqueue_many(pool, &jobs).await {
        Ok(enqueued) => {
            for ((job, to), enqueued) in jobs.into_iter().zip(answers).zip(enqueued) {
                let _ = to.send(Ok((job, enqueued)));
            }
        }
        Err(err) if refused(&err) => {
            // Nothing was written: each job on its own, in arrival order, so
            // that one refused job fails only its own request.
            for (job, to) in jobs.into_iter().zip(answers) {
                let _ = to.send(write_one(pool, job).await);
            }
        }
        Err(err) => {
            tracing::warn!(jobs = jobs.len(), error = %err, "writing a batch of enqueued jobs failed");
            let message = format!(
                "writing this job together with {} others failed: {err}",
                jobs.len() - 1
            );
            for to in answers {
                let _ = to.send(Err(interrupted(&message)));
            }
        }
    }
}

/// Whether `err` says the statement was refused, so that it wrote nothing:
/// a check before the database was asked, or the database's own error
/// answer to the statement. Anything else (no answer, a lost connection, a
/// row that did not decode) may have come after the commit.
fn refused(err: &jobwire_core::Error) -> bool {
    use jobwire_core::Error as Core;
    matches!(
        err,
        Core::InvalidJob { .. }
            | Core::InvalidArgument { .. }
            | Core::PayloadTooLarge { .. }
            | Core::QueueFull { .. }
            | Core::RateLimited { .. }
            | Core::ConstraintViolation { .. }
            | Core::Database(sqlx::Error::Database(_))
    )
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
    use chrono::{DateTime, Utc};
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

    #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
    async fn the_jobs_of_concurrent_requests_are_written_by_one_statement(pool: PgPool) {
        let batches = EnqueueBatches::start(pool.clone());
        let answers = join_all((0..20).map(|i| batches.enqueue(job(i)))).await;
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
        let answers = join_all(jobs.map(|job| batches.enqueue(job))).await;
        for (i, answer) in answers.iter().enumerate() {
            match (i, answer) {
                (3, Err(Error::PayloadTooLarge { limit: 100, .. })) => {}
                (
                    5,
                    Err(Error::InvalidJob {
                        field: "job_type", ..
                    }),
                ) => {}
                (3 | 5, other) => panic!("request {i}: {other:?}"),
                (_, other) => assert!(other.is_ok(), "request {i}: {other:?}"),
            }
        }
        let rows = written(&pool).await;
        assert_eq!(
            rows.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            [0, 1, 2, 4, 6, 7],
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
        let answers = join_all((0..5).map(|i| batches.enqueue(job(i)))).await;
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
        let rows = written(&pool).await;
        assert_eq!(rows.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
    async fn requests_naming_one_idempotency_key_get_one_job(pool: PgPool) {
        let batches = EnqueueBatches::start(pool.clone());
        let keyed = |i| job(i).with_dedup_key("order-7");
        let answers = join_all((0..4).map(|i| batches.enqueue(keyed(i)))).await;
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
}
