//! What the platform keeps outside the cluster: the platform database ([`db`]: accounts, tokens as hashes, SSH keys,
//! memberships, the audit journal, claims, logs and usage; migrations at the repository's `migrations/`) and env
//! values sealed under the platform's keyring ([`env`]). Every role that reads or writes them stands on this crate;
//! it knows nothing of HTTP.

pub mod db;
pub mod env;
