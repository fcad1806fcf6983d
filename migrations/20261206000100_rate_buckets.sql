-- Hourly budgets every API replica shares (registrations and OAuth sign-ins per source address, verification
-- mails per address, SSH logins per key): one GCRA bucket per scope and key, held as its theoretical arrival time.
-- A bucket whose time has passed is full again and is the same as no row; the hourly sweep deletes those.

CREATE TABLE rate_buckets (
    scope text NOT NULL,
    key text NOT NULL,
    tat timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);
