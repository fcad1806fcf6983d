//! What the REST API needs from the cluster and the disk: a cache of the custom resources, the users' namespaces,
//! the bare git repositories, and the sweep of database rows whose deploy or app is gone.

pub mod cache;
pub mod repos;
pub mod sweep;
pub mod tenancy;
