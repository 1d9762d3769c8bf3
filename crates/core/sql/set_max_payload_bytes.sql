-- Set the payload limit every enqueue path reads.
INSERT INTO job_settings (singleton, max_payload_bytes)
VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE SET max_payload_bytes = excluded.max_payload_bytes, updated_at = now()
