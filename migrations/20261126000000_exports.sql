-- Exports of an app: a tar.gz of its repository (a git bundle), env names per channel, each channel's database dump
-- and bucket, built in the background into the snapshot archive's bucket and downloadable until it expires.

CREATE TABLE exports (
    id uuid PRIMARY KEY,
    app_id uuid NOT NULL,
    -- Who asked for it (the audit journal names the token too).
    requested_by uuid REFERENCES users (id) ON DELETE SET NULL,
    status text NOT NULL CHECK (status IN ('queued', 'running', 'ready', 'failed', 'expired')),
    -- Why it failed or expired, in words for the person who asked.
    reason text,
    -- The archive's key in the snapshot bucket, once ready.
    object_key text,
    size_bytes bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz,
    -- The process building it writes this while it lives; an export in flight whose heartbeat stopped was
    -- abandoned (its process ended) and is failed by the next reader.
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    -- When a ready archive is deleted.
    expires_at timestamptz
);
-- One export in flight per app.
CREATE UNIQUE INDEX exports_one_in_flight ON exports (app_id) WHERE status IN ('queued', 'running');
CREATE INDEX exports_app ON exports (app_id, created_at);
CREATE INDEX exports_expiring ON exports (expires_at) WHERE status = 'ready';
