-- Quota leases: a gateway takes a slice of an owner's remaining quota for a channel's small writes at once, and
-- its writes take from the slice in memory instead of reserving each one here. A lease is a row of blob_pending
-- like a write's reservation, so it counts against the quota for every gateway replica; as its writes are
-- counted, their bytes move from the lease into the store's usage; the gateway ends the lease when its channel's
-- writes have been idle a moment, and what was left of it stops counting. What a lease holds and no write has
-- taken yet is not the owner's usage: the usage the API reports leaves leases out. settled_bytes is how much of
-- the lease its writes have moved into the usage so far: the gateway reports running totals, so a report applied
-- twice moves nothing more.
ALTER TABLE blob_pending ADD COLUMN leased boolean NOT NULL DEFAULT false;
ALTER TABLE blob_pending ADD COLUMN settled_bytes bigint NOT NULL DEFAULT 0;

-- The bytes an owner's stores hold and their writes and leases have reserved, read under the owner's lock (held
-- to the end of the transaction): every check against an owner's quota reads it here, so no two pass it together.
CREATE FUNCTION blob_owner_taken(store_owner text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('slipway.blob:' || store_owner, 0));
    RETURN coalesce((SELECT sum(s.usage_bytes) FROM blob_stores s WHERE s.owner = store_owner), 0)
         + coalesce((SELECT sum(p.bytes) FROM blob_pending p WHERE p.owner = store_owner), 0);
END
$$;

-- A write's reservation, unchanged but for reading the owner's bytes through blob_owner_taken.
CREATE OR REPLACE FUNCTION blob_reserve(reservation uuid, channel uuid, bytes bigint, byte_limit bigint, ttl interval)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    store_owner text;
BEGIN
    SELECT owner INTO store_owner FROM blob_stores WHERE channel_id = channel;
    IF store_owner IS NULL THEN
        RETURN 'gone';
    END IF;
    IF byte_limit >= 0 AND blob_owner_taken(store_owner) + bytes > byte_limit THEN
        RETURN 'quota';
    END IF;
    INSERT INTO blob_pending (id, channel_id, owner, bytes, expires_at)
        VALUES (reservation, channel, store_owner, bytes, now() + ttl);
    RETURN 'ok';
END
$$;

-- Takes a lease of up to `want` bytes for the channel's writes, at most an eighth of what is left of the owner's
-- quota, so that leases never hold much of it; none (0) when that is less than `smallest` (the owner is near the
-- limit: each write reserves exactly what it needs instead). -1 when the store is gone. The bytes granted
-- otherwise.
CREATE FUNCTION blob_lease(lease uuid, channel uuid, want bigint, smallest bigint, byte_limit bigint, ttl interval)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    store_owner text;
    granted bigint := want;
BEGIN
    SELECT owner INTO store_owner FROM blob_stores WHERE channel_id = channel;
    IF store_owner IS NULL THEN
        RETURN -1;
    END IF;
    IF byte_limit >= 0 THEN
        granted := least(want, greatest(byte_limit - blob_owner_taken(store_owner), 0) / 8);
        IF granted < smallest THEN
            RETURN 0;
        END IF;
    END IF;
    INSERT INTO blob_pending (id, channel_id, owner, bytes, expires_at, leased)
        VALUES (lease, channel, store_owner, granted, now() + ttl, true);
    RETURN granted;
END
$$;
