//! Reconcilers that turn slipway's custom resources into workloads on the cluster: one module per resource, each
//! a `reconcile` and an `error_policy` built from small steps (read, validate, build children, apply, status).

pub mod adopt;
pub mod app;
pub mod backoff;
pub mod blob;
pub mod build;
pub mod caches;
pub mod channel;
pub mod context;
mod deletion;
pub mod deploy;
pub mod domain;
pub mod error;
pub mod evacuate;
pub mod forward;
pub mod ingress;
pub mod leader;
pub mod log_archive;
pub mod metrics;
pub mod network_policies;
pub mod operator;
pub mod plan;
pub mod postgres;
pub mod probes;
pub mod reflectors;
pub mod run;
mod status;
pub mod tenancy;
pub mod workload;

pub use context::{Context, OperatorConfig};
pub use error::Error;
