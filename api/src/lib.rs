//! slipway: a self-hostable hosting platform for Kubernetes.
//!
//! One binary serves every role (`slipway --help` lists them); this library holds everything the roles are made
//! of, so it can be tested without a process boundary.

pub mod admin;
pub mod backup;
pub mod blob_settings;
pub mod console;
pub mod job_kinds;
pub mod mcp;
pub mod operator;
pub mod postgres_settings;
pub mod registry_tokens;
pub mod routes;
pub mod serve;
pub mod telemetry;
