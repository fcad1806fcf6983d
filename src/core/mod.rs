//! The service layer under the REST routes: the state every request and background task shares, the one error
//! type, who may see and do what (`access`), the platform database's claims on names and caps, the public URLs, and the writes
//! of Channels and Deploys that routes, MCP and transfers share. The REST API (`api`), the MCP server, the console, git and the background jobs all stand on it; nothing
//! here imports the REST layer (`hack/layers` checks it).

pub mod access;
pub mod caller;
pub mod channel_database;
pub mod channels;
pub mod claims;
pub mod deploys;
pub mod error;
pub mod internal_access;
pub mod metrics;
pub mod owners;
pub mod state;
