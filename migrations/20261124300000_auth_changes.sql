-- Every change to tokens or accounts is announced, so the API's in-memory token cache forgets what it read:
-- a revoked token, a deleted account or a changed plan takes effect at once in every process.
CREATE FUNCTION slipway_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('slipway_auth_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER tokens_changed AFTER UPDATE OR DELETE OR TRUNCATE ON tokens
    FOR EACH STATEMENT EXECUTE FUNCTION slipway_auth_changed();
CREATE TRIGGER users_changed AFTER UPDATE OR DELETE OR TRUNCATE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION slipway_auth_changed();
