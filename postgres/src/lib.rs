//! SQL databases per non-static channel, on the data server (a Postgres server the platform administers).
//!
//! - [`store`] holds each channel's record in the platform database: the names of its database and roles and
//!   both roles' passwords, sealed like env secrets.
//! - [`snapshots`] takes `pg_dump -Fc` snapshots into the [`archive`] (the object store's system bucket) and
//!   prunes them by plan, with the dump's [`progress`] read from the data server (the daily ones are
//!   the API's nightly checkpoint jobs); [`restore`] puts one back in one transaction, as a job
//!   (the API's SQL restore job) that outlives the request.
//! - The API's `core::channel_database` is a channel's database as the routes, the SQL proxy and exports meet it.
//! - [`stream`] turns a client program's output into a response body that breaks when the program fails.
//!
//! Provisioning and dropping (with the channel) are the Channel reconciler's (`slipway_controllers::postgres`),
//! which asks the API server to record and forget databases; the API server measures them for the status routes.

pub mod archive;
pub mod progress;
pub mod restore;
pub mod snapshots;
pub mod store;
pub mod stream;
