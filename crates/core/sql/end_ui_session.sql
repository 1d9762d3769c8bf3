-- Log out: the session is gone, so its cookie opens nothing any more.
DELETE FROM job_ui_sessions WHERE session_sha256 = $1
