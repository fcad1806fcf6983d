//! The platform as it ships, on a real single-node cluster (`hack/node.sh`): slipway installed by its Helm chart
//! (`hack/install.sh`, run by `hack/test.sh e2e` before these tests) and used over its addresses. `hack/test.sh`
//! runs the modules one after another, each a run of its own, because each leaves the release as the next expects
//! it: `monitoring::` (the chart's alerts firing in a real Prometheus, on the fresh install while the cluster tier
//! runs; `e2e_platform_monitoring`), then `platform::` (the user's view; `SLIPWAY_TESTS=e2e_platform`), then `s3::`
//! (S3 clients and Ceph's s3-tests against a channel's public endpoint; `e2e_platform_s3`), then `isolation::` (a
//! hostile tenant, with the chart's isolation switched off and on again; `e2e_platform_isolation`), then `size::`
//! (data at the sizes users reach, one test at a time; `e2e_platform_size`), then `backup::` (the platform backed
//! up, taken away and restored;
//! `e2e_platform_backup`), then `git_objects::` (the repositories moved into object storage and served by two api
//! replicas; `e2e_platform_git_objects`), then `upgrade::` (`helm upgrade` under load and `helm uninstall`;
//! `e2e_platform_upgrade`).
//!
//! One test binary, not one per module, for the reasons `tests/cluster/main.rs` gives.

#[path = "../support/mod.rs"]
mod support;

mod backup;
mod git_objects;
mod isolation;
mod monitoring;
mod platform;
mod s3;
mod size;
mod upgrade;
