-- Environment variables and secrets of apps (app defaults) and channels (overrides). Values are encrypted by the
-- platform (AES-256-GCM) before they reach this table; `key_id` names the key of the platform's keyring that
-- sealed the row, so keys can be rotated.

CREATE TABLE env_vars (
    app_id uuid NOT NULL,
    -- NULL for an app default; the channel's id for a per-channel override.
    channel_id uuid,
    key text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('env', 'secret')),
    key_id text NOT NULL,
    sealed bytea NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX env_vars_scope_key
    ON env_vars (app_id, coalesce(channel_id, '00000000-0000-0000-0000-000000000000'::uuid), key);

-- What a deploy was given: resolved at deploy time and never changed after. Values stay sealed; system-injected
-- keys are recorded by name only.
CREATE TABLE deploy_env_snapshots (
    deploy_id uuid PRIMARY KEY,
    app_id uuid NOT NULL,
    channel_id uuid NOT NULL,
    -- [{key, kind, source, key_id, sealed (base64)}]
    entries jsonb NOT NULL,
    system_keys text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deploy_env_snapshots_channel ON deploy_env_snapshots (channel_id, created_at);
