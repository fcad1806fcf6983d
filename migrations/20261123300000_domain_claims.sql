-- The API's claims on custom domains. Each domain the API attaches is claimed here first, in one transaction that
-- locks the app owner's row: parallel attachments to one account's channels queue there, so none can pass the
-- per-channel limit, and the primary key lets one channel only, of any tenant, hold a domain. A claim is released
-- when the write to the cluster fails and when the API detaches the domain; one whose Domain is gone (deleted with
-- kubectl or with its channel, or a crashed request) lapses once it is older than a few minutes.

CREATE TABLE domain_claims (
    -- The canonical domain name (lowercase ASCII, no trailing dot).
    domain text PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    namespace text NOT NULL,
    -- The Channel resource's name, <app>.<channel>.
    channel text NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX domain_claims_channel ON domain_claims (namespace, channel);
