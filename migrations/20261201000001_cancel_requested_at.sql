-- jobwire schema: when a cancel was asked of a running job.
--
-- A cancel of a RUNNING job is a request the worker acts on at its next
-- heartbeat; the time between the request and CANCELLED is the cancellation
-- latency operators watch (jobwire_job_cancel_latency_seconds). Set by
-- request_cancel, kept in jobs_history with the rest of the row.
ALTER TABLE jobs ADD COLUMN cancel_requested_at timestamptz;
ALTER TABLE jobs_history ADD COLUMN cancel_requested_at timestamptz;
