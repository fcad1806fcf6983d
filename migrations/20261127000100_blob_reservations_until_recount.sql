-- A reservation whose write never settled (the gateway stopped between reserving and counting) keeps counting
-- after it expires, until a recount of its store replaces it with what the backend really holds: the recount
-- removes a store's expired reservations in the statement that sets its usage. Before, the next reservation of the
-- owner dropped them when they expired, and a write that had reached the backend went uncounted until the store's
-- next scheduled recount, up to an hour later. An owner without a limit has nothing to check, so their writes no
-- longer queue for the owner's lock.
CREATE OR REPLACE FUNCTION blob_reserve(reservation uuid, channel uuid, bytes bigint, byte_limit bigint, ttl interval)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    store_owner text;
    taken bigint;
BEGIN
    SELECT owner INTO store_owner FROM blob_stores WHERE channel_id = channel;
    IF store_owner IS NULL THEN
        RETURN 'gone';
    END IF;
    IF byte_limit >= 0 THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('slipway.blob:' || store_owner, 0));
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

CREATE INDEX blob_pending_expires ON blob_pending (expires_at);
