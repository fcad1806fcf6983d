-- Maintenance of repositories kept in object storage. Each upload of a pack gets a key of its own
-- (`repos/<id>/<pack>.<upload>.pack`), so a pack published again under the same name never shares a bucket object
-- with a copy that is being removed; rows from before keep the plain key (`upload` is NULL). A compaction folds a
-- repository's packs into one and retires the old rows; they are removed from the bucket a grace period later,
-- when no cache can still be syncing from a snapshot that names them. `maintained_at` is when a replica last
-- claimed the repository's maintenance, so each runs once cluster-wide.
ALTER TABLE git_packs ADD COLUMN upload uuid;
ALTER TABLE git_packs ADD COLUMN retired_at timestamptz;
ALTER TABLE git_repos ADD COLUMN maintained_at timestamptz NOT NULL DEFAULT now();
