-- One quiet tenant's job (B to K in turn at random), for pgbench --rate
-- in docs/bench/capped-drain-by-hand.sh.
\set t random(1, 10)
INSERT INTO jobs (job_id, queue, job_type, tenant)
VALUES (jobwire_uuidv7(), 'noisy', 'noop', chr(65 + :t));
