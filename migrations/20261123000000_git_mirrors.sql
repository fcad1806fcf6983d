-- Apps that mirror an external git repository over SSH: one row per connected app; disconnecting deletes it (and
-- with it the deploy key). The app's own repository and deploys are untouched either way.
CREATE TABLE git_mirrors (
    app_id uuid PRIMARY KEY,
    remote_url text NOT NULL,
    -- The deploy key's public half (an OpenSSH line), shown to the owner to install on the external repository.
    public_key text NOT NULL,
    -- Its private half (OpenSSH format), sealed with the env keyring and bound to the app id; never returned.
    private_key_id text NOT NULL,
    private_key bytea NOT NULL,
    -- The SSH server's host key (an OpenSSH line), pinned by the first sync that reached the server.
    host_key text,
    connected_at timestamptz NOT NULL DEFAULT now(),
    last_synced_at timestamptz,
    last_sync_status text CHECK (last_sync_status IN ('success', 'failed')),
    last_sync_error text,
    -- ref name -> 40-hex sha after the last successful sync.
    last_sync_refs jsonb
);
