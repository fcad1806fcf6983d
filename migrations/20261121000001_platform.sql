-- The platform database: what is not cluster state. Users and their tokens (only a SHA-256 of each token is
-- stored), app memberships, and the audit journal.

CREATE TABLE users (
    id uuid PRIMARY KEY,
    username text NOT NULL UNIQUE,
    plan text NOT NULL,
    -- Account default of the agent-access switch for protected actions.
    agent_protected_actions_default boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tokens (
    id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    label text,
    scopes text[] NOT NULL,
    -- Whether the holder is an agent (protected actions need agent access turned on).
    is_agent boolean NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- The token that minted this one, if any.
    parent_id uuid REFERENCES tokens (id) ON DELETE SET NULL
);
CREATE INDEX tokens_user ON tokens (user_id);

-- People other than the owner who may use an app. The owner is the App resource's spec.owner.
CREATE TABLE app_members (
    app_id uuid NOT NULL,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role text NOT NULL CHECK (role IN ('admin', 'member')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, user_id)
);
CREATE INDEX app_members_user ON app_members (user_id);

CREATE TABLE audit_events (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    user_id uuid REFERENCES users (id) ON DELETE SET NULL,
    token_id uuid,
    app_id uuid,
    action text NOT NULL,
    detail jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_events_app ON audit_events (app_id, at);
