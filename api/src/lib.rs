//! The API server's role (`slipway api`) as the binary runs it: its flags and state ([`serve`]), the composition of
//! its public listener from the REST routes, git's smart HTTP and the MCP endpoint ([`routes`]), what each kind of
//! background job does ([`job_kinds`]), and the admin tools that share its parts ([`admin`], [`backup`],
//! [`git_import`]). The routes, MCP, the console and the data work are crates of their own below this one; the
//! operator is `slipway_controllers::operator`, so a change there does not recompile this crate.

pub mod admin;
pub mod backup;
pub mod git_import;
pub mod host_key;
pub mod job_kinds;
pub mod routes;
pub mod serve;
pub mod telemetry;
