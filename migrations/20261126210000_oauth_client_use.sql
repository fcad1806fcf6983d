-- When a client last bought a token. Registration is open to anyone, so a client never used within a day of its
-- registration is deleted (at the next registration); a used one stays.
ALTER TABLE oauth_clients ADD COLUMN used_at timestamptz;
CREATE INDEX oauth_clients_unused ON oauth_clients (created_at) WHERE used_at IS NULL;
