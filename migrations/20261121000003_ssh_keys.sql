-- SSH public keys registered on accounts: they authenticate git over SSH (and, with api_login, the SSH login
-- route). A key belongs to one account only, so the key alone names the account.

CREATE TABLE ssh_keys (
    id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- The key as one OpenSSH line without its comment: "ssh-ed25519 AAAA...".
    public_key text NOT NULL,
    -- "SHA256:..." as ssh-keygen -l prints it.
    fingerprint_sha256 text NOT NULL UNIQUE,
    label text NOT NULL,
    api_login boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ssh_keys_user ON ssh_keys (user_id);
