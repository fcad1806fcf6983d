//! The e2e tier's tests that run slipway's components in the test process, on a real single-node cluster
//! (`hack/node.sh`): the ones that reach inside a component (stop an operator mid-deploy, read the edge's metrics,
//! drive the build and run steps directly). The chart-installed platform's tests are `e2e_platform*.rs`, which run
//! against the installed release in their own order. `make test` selects a module by its file name
//! (`SLIPWAY_TESTS=e2e_deploy` runs `deploy::`).
//!
//! One test binary, not one per file, for the reasons `tests/cluster/main.rs` gives.

#[path = "../support/mod.rs"]
mod support;

mod blob;
mod build;
mod deploy;
mod edge;
mod node;
mod workload;
