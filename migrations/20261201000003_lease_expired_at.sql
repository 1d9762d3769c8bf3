-- jobwire schema: when a job's lease expired, as the sweeper found it.
--
-- The sweeper returns a job whose worker died or froze; the time that lease
-- ran out is recorded (the last one, if it happens again), so an operator
-- looking at the job sees that an attempt was lost and when. Kept in
-- jobs_history with the rest of the row.
ALTER TABLE jobs ADD COLUMN lease_expired_at timestamptz;
ALTER TABLE jobs_history ADD COLUMN lease_expired_at timestamptz;
