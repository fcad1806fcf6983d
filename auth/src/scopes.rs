//! Scope names.

/// Push, clone, tree, blob, changeset, code download, app create and delete.
pub const REPO: &str = "repo:*";
/// Deploys, logs, env and secrets, images.
pub const DEPLOY: &str = "deploy:*";
/// Channel create and delete.
pub const CHANNEL: &str = "channel:*";
/// SQL databases.
pub const DB: &str = "db:*";
/// Object-store credentials.
pub const BLOB: &str = "blob:*";
/// Usage statistics.
pub const STATS_READ: &str = "stats:read";
/// Exports.
pub const EXPORTS_READ: &str = "exports:read";
/// SQL snapshot downloads.
pub const SNAPSHOTS_READ: &str = "snapshots:read";
/// Object-store snapshot downloads.
pub const BLOBS_READ: &str = "blobs:read";
/// Binding an email address; granted only by registration and SSH login, never minted.
pub const EMAIL_BIND: &str = "email:bind";

/// The nine default scopes.
pub const DEFAULT: [&str; 9] = [
    REPO,
    DEPLOY,
    CHANNEL,
    DB,
    BLOB,
    STATS_READ,
    EXPORTS_READ,
    SNAPSHOTS_READ,
    BLOBS_READ,
];

/// The default scopes as owned strings.
pub fn default_scopes() -> Vec<String> {
    DEFAULT.iter().map(|s| (*s).to_owned()).collect()
}
