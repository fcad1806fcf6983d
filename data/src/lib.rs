//! A channel's data as the API server works on it, above the service layer and below the REST routes: checkpoints
//! of the SQL database and the bucket and their restores ([`checkpoints`]), app exports ([`exports`]), the external
//! SQL endpoint ([`sql_proxy`]) and runtime logs ([`runtime_logs`]). The routes, the MCP tools and the background
//! jobs call them; they stand on `slipway_core` and cannot import any of those.

pub mod checkpoints;
pub mod exports;
pub mod runtime_logs;
pub mod sql_proxy;
