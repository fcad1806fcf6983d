//! The API server's role (`slipway api`) as the binary runs it: its flags and state ([`serve`]), the composition of
//! its public listener from the REST routes, git's smart HTTP and the MCP endpoint ([`routes`]), what each kind of
//! background job does ([`job_kinds`]), and the subcommands that share its parts: the operator's wiring
//! ([`operator`]), the admin tools ([`admin`], [`backup`]). The routes, MCP, the console and the data work are crates
//! of their own below this one.

pub mod admin;
pub mod backup;
pub mod blob_settings;
pub mod job_kinds;
pub mod operator;
pub mod postgres_settings;
pub mod registry_tokens;
pub mod routes;
pub mod serve;
pub mod telemetry;
