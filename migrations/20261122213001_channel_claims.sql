-- The API's claims on channel hostnames and plan slots. Each channel the API creates is claimed here first, in one
-- transaction that locks its owner's row: parallel requests of one account queue there, so no two can take the
-- last slot of a plan, and the primary key lets one request only hold a hostname. A claim is released when the
-- write to the cluster fails and when the API deletes the channel or its app; one whose channel is gone (deleted
-- with kubectl, or a crashed request) lapses once it is older than a few minutes.

CREATE TABLE channel_claims (
    -- First label of the channel's hostname: <app>-<owner> or <channel>-<app>-<owner>.
    host_label text PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    namespace text NOT NULL,
    app text NOT NULL,
    -- The Channel resource's name, <app>.<channel>.
    channel text NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (namespace, channel)
);
CREATE INDEX channel_claims_user ON channel_claims (user_id);
