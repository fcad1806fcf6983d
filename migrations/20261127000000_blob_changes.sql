-- Every change to what the S3 gateway keeps in memory per access key is announced on slipway_blob_changed, so each
-- gateway forgets it as soon as it hears: a store's key pair, buckets or owner (the payload is the access key id; a
-- deleted channel's key is refused at once, a replaced secret stops working at once), and an account's plan or
-- existence (an empty payload: the quotas of every key may have changed). Usage counts move with every write and
-- are not kept in memory, so they announce nothing.
CREATE FUNCTION slipway_blob_store_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_notify('slipway_blob_changed', OLD.access_key_id);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM pg_notify('slipway_blob_changed', NEW.access_key_id);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION slipway_blob_everything_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('slipway_blob_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER blob_stores_inserted AFTER INSERT ON blob_stores
    FOR EACH ROW EXECUTE FUNCTION slipway_blob_store_changed();
CREATE TRIGGER blob_stores_keys_updated AFTER UPDATE ON blob_stores
    FOR EACH ROW WHEN ((OLD.owner, OLD.virtual_bucket, OLD.backend_bucket, OLD.access_key_id, OLD.key_id, OLD.sealed_secret)
                       IS DISTINCT FROM
                       (NEW.owner, NEW.virtual_bucket, NEW.backend_bucket, NEW.access_key_id, NEW.key_id, NEW.sealed_secret))
    EXECUTE FUNCTION slipway_blob_store_changed();
CREATE TRIGGER blob_stores_deleted AFTER DELETE ON blob_stores
    FOR EACH ROW EXECUTE FUNCTION slipway_blob_store_changed();
CREATE TRIGGER blob_stores_truncated AFTER TRUNCATE ON blob_stores
    FOR EACH STATEMENT EXECUTE FUNCTION slipway_blob_everything_changed();
CREATE TRIGGER users_plan_changed_blob AFTER UPDATE OF plan ON users
    FOR EACH ROW WHEN (OLD.plan IS DISTINCT FROM NEW.plan) EXECUTE FUNCTION slipway_blob_everything_changed();
CREATE TRIGGER users_deleted_blob AFTER DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION slipway_blob_everything_changed();
CREATE TRIGGER users_truncated_blob AFTER TRUNCATE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION slipway_blob_everything_changed();
