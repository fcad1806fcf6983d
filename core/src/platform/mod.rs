//! What the REST API needs from the cluster: a cache of the custom resources, the users' namespaces,
//! and the sweep of database rows whose deploy or app is gone.

pub mod cache;
pub mod sweep;
pub mod tenancy;
