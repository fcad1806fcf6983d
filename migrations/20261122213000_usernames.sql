-- Usernames are lowercase letters and digits: the username ends every channel hostname, and a '-' in it would let
-- one account form hostnames of another's future apps. NOT VALID: rows from before the rule stay readable; every
-- new or changed row is checked.
ALTER TABLE users ADD CONSTRAINT users_username_format CHECK (username ~ '^[a-z0-9]{1,40}$') NOT VALID;
