-- Every change to tokens or accounts is announced, so the API's in-memory token cache forgets what it read:
-- a revoked token, a deleted account or a changed plan takes effect in every process as soon as it hears.
-- Row triggers that skip rows left as they were: a statement that changes nothing (an SSH login's cap that
-- revoked no token) announces nothing. Postgres sends one notice per transaction however many rows changed.
CREATE FUNCTION slipway_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('slipway_auth_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER tokens_updated AFTER UPDATE ON tokens
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION slipway_auth_changed();
CREATE TRIGGER tokens_deleted AFTER DELETE ON tokens
    FOR EACH ROW EXECUTE FUNCTION slipway_auth_changed();
CREATE TRIGGER tokens_truncated AFTER TRUNCATE ON tokens
    FOR EACH STATEMENT EXECUTE FUNCTION slipway_auth_changed();
CREATE TRIGGER users_updated AFTER UPDATE ON users
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION slipway_auth_changed();
CREATE TRIGGER users_deleted AFTER DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION slipway_auth_changed();
CREATE TRIGGER users_truncated AFTER TRUNCATE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION slipway_auth_changed();
