-- Jobs that finished (any terminal state) per queue in each of the last $1
-- minutes, from the hot table and history together. minutes_ago counts back
-- from the database clock's current minute (0: this minute), so the caller
-- never mixes its own clock in; minutes with none are absent. Both tables
-- are read through their finished_at indexes.
SELECT queue,
       (extract(epoch FROM date_trunc('minute', now()) - date_trunc('minute', finished_at)) / 60)::int4
           AS minutes_ago,
       count(*) AS finished
FROM (
    SELECT queue, finished_at FROM jobs
    WHERE finished_at >= date_trunc('minute', now()) - ($1 - 1) * interval '1 minute'
    UNION ALL
    SELECT queue, finished_at FROM jobs_history
    WHERE finished_at >= date_trunc('minute', now()) - ($1 - 1) * interval '1 minute'
) finished
GROUP BY 1, 2
ORDER BY 1, 2 DESC
