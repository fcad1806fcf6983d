//! What the REST API needs from the cluster and the disk: a cache of the custom resources, the users' namespaces,
//! and the bare git repositories.

pub mod cache;
pub mod repos;
pub mod tenancy;
