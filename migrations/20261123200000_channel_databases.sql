-- SQL databases: one per non-static channel, on the data server. The names are fixed when the row is made (so a
-- later change of owner or name keeps them); both roles' passwords are sealed by the platform (AES-256-GCM, like
-- env values) before they reach this table.

CREATE TABLE channel_databases (
    channel_id uuid PRIMARY KEY,
    app_id uuid NOT NULL,
    -- Username of the app's owner (GET /me/postgres/storage sums by it).
    owner text NOT NULL,
    db_name text NOT NULL UNIQUE,
    role_name text NOT NULL UNIQUE,
    readonly_role_name text NOT NULL UNIQUE,
    -- The keyring entry that sealed both passwords.
    key_id text NOT NULL,
    sealed_password bytea NOT NULL,
    sealed_readonly_password bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX channel_databases_owner ON channel_databases (owner);
CREATE INDEX channel_databases_app ON channel_databases (app_id);
