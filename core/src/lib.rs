//! The service layer under the REST routes: the state every request and background task shares, the one error
//! type, who may see and do what ([`access`], by the [`caller`]), the platform database's claims on names and
//! caps ([`claims`]), and the writes of Channels and Deploys that routes, MCP and transfers share ([`channels`],
//! [`deploys`], [`owners`]).
//!
//! What the state holds lives here too, so that nothing the state is made of has to reach back up for it: the
//! cluster cache ([`platform`]), the MCP server's OAuth ([`oauth`]), registration's limits and mail
//! ([`registration`]), the open external SQL sessions ([`sql_sessions`]), the runtime-log sandbox
//! ([`log_sandbox`]) and the public URLs ([`public_urls`]). So do the domain operations more than one caller
//! reaches: memberships ([`sharing`]), moving an app to another account ([`transfer`]) and which account a person
//! signed in is ([`people`]). The REST API, the MCP server, the console, git hosting
//! and the background jobs stand on this crate, in the binary; it cannot import them.

pub mod access;
pub mod caller;
pub mod channel_database;
pub mod channels;
pub mod claims;
pub mod deploys;
pub mod error;
pub mod internal_access;
pub mod log_sandbox;
pub mod metrics;
pub mod oauth;
pub mod owners;
pub mod people;
pub mod platform;
pub mod public_urls;
pub mod registration;
pub mod sharing;
pub mod sql_sessions;
pub mod state;
pub mod transfer;
