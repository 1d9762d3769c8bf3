-- TCP keepalives for the metrics collector's election session, so that the
-- server notices a leader whose machine vanished within about a minute and
-- releases its advisory lock (with the defaults it may take hours).
SELECT set_config('tcp_keepalives_idle', '30', false),
       set_config('tcp_keepalives_interval', '10', false),
       set_config('tcp_keepalives_count', '3', false)
