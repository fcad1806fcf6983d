-- The web console: people sign in there (through the upstream provider, or by a code mailed to their account's
-- verified address) and mint tokens there.

-- `console_session`: the token a console sign-in holds for its browser (revoked at sign-out);
-- `console`: a token a person minted on the console's /tokens page. Both are roots of their chain: revoking a
-- session never takes the tokens minted in it along.
ALTER TABLE tokens DROP CONSTRAINT tokens_origin_check;
ALTER TABLE tokens ADD CONSTRAINT tokens_origin_check
    CHECK (origin IN ('registration', 'ssh_login', 'oauth', 'console_session', 'console'));

-- When a token was last used, to the minute (a process records a token's use at most once a minute). Kept apart
-- from `tokens` so that recording a use announces nothing to the token caches.
CREATE TABLE token_uses (
    token_id uuid PRIMARY KEY REFERENCES tokens (id) ON DELETE CASCADE,
    last_used_at timestamptz NOT NULL
);

-- One open console sign-in code per account, kept only as an HMAC under the platform's key; five wrong codes lock
-- it until a new one is sent.
CREATE TABLE console_codes (
    user_id uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    code_hash bytea NOT NULL CHECK (length(code_hash) = 32),
    sent_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    wrong_codes integer NOT NULL DEFAULT 0
);

-- An app moved to another account (a console action) takes new ids: the rows keyed by its ids are re-keyed in
-- one transaction, and the rows that refer to them follow.
ALTER TABLE notes DROP CONSTRAINT notes_app_id_thread_fkey;
ALTER TABLE notes ADD CONSTRAINT notes_app_id_thread_fkey
    FOREIGN KEY (app_id, thread) REFERENCES note_threads (app_id, number) ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE blob_pending DROP CONSTRAINT blob_pending_channel_id_fkey;
ALTER TABLE blob_pending ADD CONSTRAINT blob_pending_channel_id_fkey
    FOREIGN KEY (channel_id) REFERENCES blob_stores (channel_id) ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE blob_parts DROP CONSTRAINT blob_parts_channel_id_fkey;
ALTER TABLE blob_parts ADD CONSTRAINT blob_parts_channel_id_fkey
    FOREIGN KEY (channel_id) REFERENCES blob_stores (channel_id) ON DELETE CASCADE ON UPDATE CASCADE;
