-- SQL snapshots: one row per complete dump file in the snapshot archive (the object store's system bucket). A
-- row is written only after its file is complete, and removed only after its file is.

CREATE TABLE postgres_snapshots (
    id uuid PRIMARY KEY,
    channel_id uuid NOT NULL,
    app_id uuid NOT NULL,
    kind text NOT NULL CHECK (kind IN ('pre_deploy', 'nightly')),
    -- The deploy a pre_deploy snapshot was taken for (one each).
    deploy_id uuid UNIQUE,
    -- The commit that ran when it was taken (null when none had run).
    git_sha text,
    -- The file in the archive, and its size.
    object_key text,
    size_bytes bigint,
    -- The UTC day it was taken on (one nightly per channel per day).
    taken_on date NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')::date,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'pre_deploy') = (deploy_id IS NOT NULL))
);
CREATE UNIQUE INDEX postgres_snapshots_nightly ON postgres_snapshots (channel_id, taken_on)
    WHERE kind = 'nightly';
CREATE INDEX postgres_snapshots_channel ON postgres_snapshots (channel_id, created_at DESC);

-- A token may be good for one path only (a snapshot's download token); NULL: every route its scopes allow.
ALTER TABLE tokens ADD COLUMN only_path text;
