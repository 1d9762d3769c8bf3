-- The payload limit every enqueue path reads (the hard ceiling if the
-- settings row is missing).
SELECT coalesce((SELECT max_payload_bytes FROM job_settings), 1048576)
