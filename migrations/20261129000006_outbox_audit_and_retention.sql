-- jobwire schema, part 6: recovering outbox dead letters, audited.
--
-- `jobwire outbox replay` moves rows from job_outbox_dead back into
-- job_outbox. job_audit records actions on jobs (its job_id is required);
-- an outbox row may have no job behind it, so its replays are recorded here.
CREATE TABLE job_outbox_audit (
    id           bigserial PRIMARY KEY,
    outbox_id    bigint NOT NULL,
    topic        text NOT NULL,
    action       text NOT NULL CHECK (action <> ''),
    actor        text NOT NULL CHECK (actor <> ''),
    reason       text,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now()
);
