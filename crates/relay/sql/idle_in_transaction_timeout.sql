-- Bound how long this pass's transaction may sit idle holding its row locks
-- (a relay process that froze or lost its broker mid-publish): past it the
-- server ends the session and other relays can take the rows.
SELECT set_config('idle_in_transaction_session_timeout', $1, true)
