-- A change to an API token is announced, so that an API server may keep the
-- tokens it has checked instead of reading job_api_tokens on every request.
--
-- Looking the token up took one of the two statements of every POST /jobs,
-- with its own pool checkout; keeping checked tokens in the server raised
-- POST /jobs by 24 % at 8 clients and 50 % at 64, to 0.82-0.87 of the
-- library's single-job rate at 64 clients (0.61-0.64 before)
-- (docs/benchmarks.md, "API servers keep the tokens they have checked").
--
-- The server forgets a token when it hears its id on jobwire_api_tokens,
-- forgets every token whenever its LISTEN connection drops, trusting none
-- it kept until it listens again, and reads a kept token again after ten
-- seconds whatever it heard (docs/api.md, "Authentication"). Every
-- UPDATE or DELETE of a row is announced, not only a revocation: the
-- channel says "forget this one", and forgetting a token that is still
-- live costs one lookup. A TRUNCATE is announced with an empty payload:
-- forget them all.

CREATE FUNCTION jobwire_announce_api_token_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('jobwire_api_tokens', '');
    ELSE
        PERFORM pg_notify('jobwire_api_tokens', OLD.token_id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER job_api_tokens_announce_change
    AFTER UPDATE OR DELETE ON job_api_tokens
    FOR EACH ROW EXECUTE FUNCTION jobwire_announce_api_token_change();

CREATE TRIGGER job_api_tokens_announce_truncate
    AFTER TRUNCATE ON job_api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION jobwire_announce_api_token_change();
