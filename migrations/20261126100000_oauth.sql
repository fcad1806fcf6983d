-- OAuth 2.0 for people at the MCP server: clients registered dynamically (RFC 7591), authorization requests in
-- flight through the upstream identity provider, and their single-use codes. The tokens they end in are ordinary
-- `tokens` rows, bound to the MCP endpoint by `audience`.

-- Which endpoint a token is good at: null for every route its scopes allow; 'mcp' for the MCP endpoint only (and
-- the routes its tools call in-process).
ALTER TABLE tokens ADD COLUMN audience text CHECK (audience IN ('mcp'));
ALTER TABLE tokens DROP CONSTRAINT tokens_origin_check;
ALTER TABLE tokens ADD CONSTRAINT tokens_origin_check CHECK (origin IN ('registration', 'ssh_login', 'oauth'));

CREATE TABLE oauth_clients (
    client_id text PRIMARY KEY,
    client_name text,
    -- Compared exactly with the redirect_uri of each request.
    redirect_uris text[] NOT NULL CHECK (cardinality(redirect_uris) > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One authorization request, from the client's redirect to the code's redemption. It is found by the state sent
-- upstream (the provider's callback), by its id and the browser's cookie (the consent), and by its code (the token
-- endpoint); only hashes of those secrets are kept, besides the upstream leg's own PKCE verifier and nonce, which
-- live as long as the request (ten minutes).
CREATE TABLE oauth_requests (
    id uuid PRIMARY KEY,
    client_id text NOT NULL REFERENCES oauth_clients (client_id) ON DELETE CASCADE,
    redirect_uri text NOT NULL,
    client_state text NOT NULL,
    code_challenge text NOT NULL,
    scopes text[] NOT NULL,
    upstream_state_hash bytea NOT NULL UNIQUE CHECK (length(upstream_state_hash) = 32),
    upstream_verifier text NOT NULL,
    upstream_nonce text NOT NULL,
    browser_hash bytea NOT NULL CHECK (length(browser_hash) = 32),
    -- The account, once the person signed in upstream.
    user_id uuid REFERENCES users (id) ON DELETE CASCADE,
    -- The code, once the person allowed the client.
    code_hash bytea UNIQUE CHECK (length(code_hash) = 32),
    code_expires_at timestamptz,
    code_used_at timestamptz,
    -- The token the code was exchanged for (revoked if the code is presented again).
    token_id uuid REFERENCES tokens (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX oauth_requests_expiry ON oauth_requests (expires_at);
