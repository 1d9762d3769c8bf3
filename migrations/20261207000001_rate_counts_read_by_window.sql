-- no-transaction
-- jobwire schema: a tenant's enqueue rate reads only its live counter rows.
--
-- `jobwire_take_enqueue_rate` sums the rows of (queue, tenant) whose window
-- is the current or the previous one. It found them through the primary
-- key (queue, tenant, backend), which holds one row per database session
-- that ever enqueued for the tenant, and the retention pass deletes a row
-- only two days after its window began. A producer that opens a session
-- per request leaves a row per request: with 200,000 of them, every
-- enqueue of that tenant read all 200,000 and took 20–30 ms instead of
-- 2–4 (docs/benchmarks.md, "A tenant's enqueue rate read every session's
-- counter row"). With the window in an index after the tenant, the read
-- stops at the rows of the last two windows.
--
-- An update that leaves `window_start` as it was (every enqueue but the
-- first of a window) changes no indexed column and stays a HOT update.
-- Built CONCURRENTLY, one statement per file, so applying it never blocks
-- an enqueue.
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_enqueue_counts_window_idx
    ON job_enqueue_counts (queue, tenant, window_start);
