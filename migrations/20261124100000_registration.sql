-- Agents register themselves with an SSH key and sign in with it; an account binds an email address by a code
-- sent to it, which moves it from `starter` to `basic`.

-- Where a token came from: `registration` and `ssh_login` tokens carry email:bind; an account holds at most 20
-- live `ssh_login` tokens (the oldest are revoked as new ones are minted). Null for every other token.
ALTER TABLE tokens ADD COLUMN origin text CHECK (origin IN ('registration', 'ssh_login'));
CREATE INDEX tokens_user_origin ON tokens (user_id, origin) WHERE origin IS NOT NULL;

-- How the account was made (`registration` for self-registered agents; the global registration budget counts
-- these), its verified email address (unique platform-wide, stored lowercase), and when it was deactivated
-- (its keys are removed and its tokens revoked then; a deactivated account signs in no more).
ALTER TABLE users ADD COLUMN origin text;
ALTER TABLE users ADD COLUMN email text UNIQUE;
ALTER TABLE users ADD COLUMN email_verified_at timestamptz;
ALTER TABLE users ADD COLUMN deactivated_at timestamptz;
CREATE INDEX users_registered ON users (created_at) WHERE origin = 'registration';

-- Signatures already used to register or sign in, by SHA-256, until their timestamp has left the window: a
-- replayed signature is refused.
CREATE TABLE used_signatures (
    signature_hash bytea PRIMARY KEY CHECK (length(signature_hash) = 32),
    expires_at timestamptz NOT NULL
);
CREATE INDEX used_signatures_expiry ON used_signatures (expires_at);

-- One open email challenge per account. The code is kept only as an HMAC under the platform's key.
CREATE TABLE email_challenges (
    user_id uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    email text NOT NULL,
    code_hash bytea NOT NULL CHECK (length(code_hash) = 32),
    sent_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    wrong_codes integer NOT NULL DEFAULT 0
);
