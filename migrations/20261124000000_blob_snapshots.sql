-- Object-store checkpoints. A marker is taken at the same checkpoint as an SQL snapshot (before a non-static
-- deploy, and nightly) and lists the version of every object current at that instant: restore and download read
-- that list, and pruning keeps every version a retained marker lists.

CREATE TABLE blob_snapshots (
    id uuid PRIMARY KEY,
    channel_id uuid NOT NULL,
    app_id uuid NOT NULL,
    kind text NOT NULL CHECK (kind IN ('pre_deploy', 'nightly')),
    -- The deploy a pre_deploy marker was taken for (one each).
    deploy_id uuid UNIQUE,
    -- The SQL snapshot of the same checkpoint; null when the two did not align. Not a foreign key: the SQL row may
    -- be pruned first, and the marker still names it.
    pg_snapshot_id uuid UNIQUE,
    -- The instant the listing began: objects "as of" the checkpoint.
    snapshot_ts timestamptz NOT NULL,
    object_count bigint NOT NULL,
    total_bytes bigint NOT NULL,
    taken_on date NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')::date,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'pre_deploy') = (deploy_id IS NOT NULL))
);
CREATE UNIQUE INDEX blob_snapshots_nightly ON blob_snapshots (channel_id, taken_on) WHERE kind = 'nightly';
CREATE INDEX blob_snapshots_channel ON blob_snapshots (channel_id, created_at DESC);

-- The objects of a marker: each key with the version current at the checkpoint.
CREATE TABLE blob_snapshot_objects (
    snapshot_id uuid NOT NULL REFERENCES blob_snapshots (id) ON DELETE CASCADE,
    key text NOT NULL,
    version_id text NOT NULL,
    size_bytes bigint NOT NULL,
    -- The version's ETag: a restore leaves a key alone whose current version has the same content.
    etag text,
    last_modified timestamptz,
    PRIMARY KEY (snapshot_id, key)
);
