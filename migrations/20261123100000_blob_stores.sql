-- Object storage: one store per channel, reached through the platform's S3 gateway. The secret key is sealed by
-- the platform (AES-256-GCM, like env values) before it reaches this table. Usage is counted here, per channel,
-- and summed per owner for the plan's byte quota: every stored version counts, and so do the parts of multipart
-- uploads not yet completed or aborted.

CREATE TABLE blob_stores (
    channel_id uuid PRIMARY KEY,
    app_id uuid NOT NULL,
    -- Username of the app's owner; the quota is the owner's.
    owner text NOT NULL,
    -- The bucket name clients use (the channel's hostname label).
    virtual_bucket text NOT NULL,
    -- The bucket on the backend that holds the channel's objects.
    backend_bucket text NOT NULL UNIQUE,
    access_key_id text NOT NULL UNIQUE,
    -- The keyring entry that sealed the secret key.
    key_id text NOT NULL,
    sealed_secret bytea NOT NULL,
    usage_bytes bigint NOT NULL DEFAULT 0,
    -- Moves with every change of usage_bytes, so a recount can tell whether a write landed while it listed.
    usage_epoch bigint NOT NULL DEFAULT 0,
    recounted_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX blob_stores_owner ON blob_stores (owner);

-- Writes in flight through the gateway. A write reserves its bytes here before it reaches the backend, so
-- concurrent writes cannot pass the quota together; it settles (moves its real size into usage_bytes) when the
-- backend answered. A reservation a crashed gateway left behind stops counting when it expires.
CREATE TABLE blob_pending (
    id uuid PRIMARY KEY,
    channel_id uuid NOT NULL REFERENCES blob_stores (channel_id) ON DELETE CASCADE,
    owner text NOT NULL,
    bytes bigint NOT NULL CHECK (bytes >= 0),
    expires_at timestamptz NOT NULL
);
CREATE INDEX blob_pending_owner ON blob_pending (owner);
CREATE INDEX blob_pending_channel ON blob_pending (channel_id);

-- Parts of multipart uploads that are neither completed nor aborted.
CREATE TABLE blob_parts (
    channel_id uuid NOT NULL REFERENCES blob_stores (channel_id) ON DELETE CASCADE,
    upload_id text NOT NULL,
    part_number integer NOT NULL,
    bytes bigint NOT NULL CHECK (bytes >= 0),
    PRIMARY KEY (channel_id, upload_id, part_number)
);

-- Reserves `bytes` for a write to `channel`: 'ok', 'quota' when the owner's stored and reserved bytes would pass
-- `byte_limit` (-1: unlimited), or 'gone' when the store does not exist. One owner's reservations are serialized
-- by an advisory lock, so two writes cannot both take the last bytes.
CREATE FUNCTION blob_reserve(reservation uuid, channel uuid, bytes bigint, byte_limit bigint, ttl interval)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    store_owner text;
    taken bigint;
BEGIN
    SELECT owner INTO store_owner FROM blob_stores WHERE channel_id = channel;
    IF store_owner IS NULL THEN
        RETURN 'gone';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('slipway.blob:' || store_owner, 0));
    DELETE FROM blob_pending p WHERE p.owner = store_owner AND p.expires_at < now();
    IF byte_limit >= 0 THEN
        SELECT coalesce((SELECT sum(s.usage_bytes) FROM blob_stores s WHERE s.owner = store_owner), 0)
             + coalesce((SELECT sum(p.bytes) FROM blob_pending p WHERE p.owner = store_owner), 0)
          INTO taken;
        IF taken + bytes > byte_limit THEN
            RETURN 'quota';
        END IF;
    END IF;
    INSERT INTO blob_pending (id, channel_id, owner, bytes, expires_at)
        VALUES (reservation, channel, store_owner, bytes, now() + ttl);
    RETURN 'ok';
END
$$;
