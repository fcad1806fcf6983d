-- Repositories kept in object storage (`--git-storage object-store`): every app's refs live here and its packs in
-- the git bucket, so any API replica serves any repository from a disposable local cache. `version` moves with
-- every published ref update: a replica whose cache was synced at another version syncs again before it serves.
-- A ref update is one compare-and-swap under the repository row's lock; `git_ref_log` keeps every one of them.

-- `id` names the repository in the bucket and never changes; `app_id` moves to the new app when an app is
-- transferred.
CREATE TABLE git_repos (
    id uuid PRIMARY KEY,
    app_id uuid NOT NULL UNIQUE,
    head text NOT NULL DEFAULT 'refs/heads/master',
    version bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE git_refs (
    repo_id uuid NOT NULL REFERENCES git_repos (id) ON DELETE CASCADE,
    name text NOT NULL,
    oid text NOT NULL,
    PRIMARY KEY (repo_id, name)
);

-- The packs that together hold every object the refs reach, as `pack-<sha>` (the bucket holds
-- `repos/<id>/pack-<sha>.pack` and `.idx`).
CREATE TABLE git_packs (
    repo_id uuid NOT NULL REFERENCES git_repos (id) ON DELETE CASCADE,
    name text NOT NULL,
    bytes bigint NOT NULL,
    published_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (repo_id, name)
);

CREATE TABLE git_ref_log (
    repo_id uuid NOT NULL REFERENCES git_repos (id) ON DELETE CASCADE,
    version bigint NOT NULL,
    name text NOT NULL,
    old text,
    new text,
    actor text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (repo_id, version, name)
);
