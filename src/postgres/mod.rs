//! SQL databases per non-static channel, on the data server (a Postgres server the platform administers).
//!
//! - [`store`] holds each channel's record in the platform database: the names of its database and roles and
//!   both roles' passwords, sealed like env secrets.
//! - [`settings`] is how the operator and the API server are told where the data server is.
//! - [`snapshots`] takes `pg_dump -Fc` snapshots into the [`archive`] (the object store's system bucket) and
//!   prunes them by plan, with the dump's [`progress`] read from the data server (the daily ones are
//!   `crate::checkpoints::nightly`'s jobs); [`restore`] puts one back in one transaction, as a job
//!   (`crate::checkpoints::sql_restore`) that outlives the request.
//! - [`crate::core::channel_database`] is a channel's database as the routes, the SQL proxy and exports meet it.
//! - [`stream`] turns a client program's output into a response body that breaks when the program fails.
//!
//! Provisioning and dropping (with the channel) are the Channel reconciler's (`slipway_controllers::postgres`),
//! which asks the API server to record and forget databases; the API server measures them for the status routes.

pub mod archive;
pub mod progress;
pub mod restore;
pub mod settings;
pub mod snapshots;
pub mod store;
pub mod stream;
