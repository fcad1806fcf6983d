-- Bytes the edge sent for each account's hosts (channels and their public S3 endpoints), per calendar month
-- (UTC): GET /me/usage reports the current month as bandwidth_month_bytes. Measured, never limited.

CREATE TABLE bandwidth_usage (
    owner text NOT NULL,
    month date NOT NULL,
    bytes bigint NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    PRIMARY KEY (owner, month)
);
