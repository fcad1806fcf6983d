-- Bytes the edge sent for each account's hosts per day (UTC), beside the month totals in bandwidth_usage: GET
-- /me/usage reports the last 30 days as bandwidth_days, which the console draws. A report adds to both tables in
-- one statement, and drops the account's days older than 90. Days before this table existed read 0.

CREATE TABLE bandwidth_days (
    owner text NOT NULL,
    day date NOT NULL,
    bytes bigint NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    PRIMARY KEY (owner, day)
);
