//! The cluster tier: integration tests against a real kube-apiserver, a real Postgres and the other real parts
//! `hack/test.sh` starts for them (Pebble, an OIDC provider, an SMTP server, versitygw per test). Each module is
//! one area's tests; `make test` selects a module by its file name (`SLIPWAY_TESTS=cluster_forward` runs
//! `forward::`).
//!
//! One test binary, not one per file: the files then share one build of `support` and of what they use from the
//! dependencies, one link, and one pool of test threads (`--test-threads`), so a slow test in one file overlaps
//! the tests of the others instead of holding up the files after it.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod api;
mod backup;
mod blob;
mod blob_gateway;
mod checkpoints;
mod console;
mod crds;
mod deploy;
mod domains;
mod edge;
mod env;
mod exports;
mod forward;
mod git;
mod git_objects;
mod history;
mod internal;
mod jobs;
mod kubectl;
mod leader;
mod mcp;
mod mcp_arguments;
mod mcp_oauth;
mod mcp_parts;
mod mcp_transport;
mod mirror;
mod openapi;
mod operator;
mod postgres;
mod registration;
mod repo;
mod rewind;
mod roles;
mod runtime_log;
mod sign_in;
mod snapshots;
mod sql_proxy;
mod ssh_host_key;
mod token_cache;
mod webhook;
