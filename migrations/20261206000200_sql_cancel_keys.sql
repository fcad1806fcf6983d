-- The backend keys of the external SQL sessions open on any API replica, as SHA-256 digests of the process id and
-- secret key: a CancelRequest may reach another replica than its session's (a Service spreads connections), and is
-- passed on to the data server only when it names a key listed here. A session's row goes when it ends; rows a
-- crashed replica left behind go with the hourly sweep after 30 days.

CREATE TABLE sql_cancel_keys (
    digest bytea PRIMARY KEY,
    opened_at timestamptz NOT NULL DEFAULT now()
);
