//! An app's bare repository itself, below git hosting and the routes: read in-process with gix
//! ([`store`]), written without a client through changesets ([`changeset`], with the pure path, edit and hunk
//! rules in [`paths`] and [`patch`]), packed as a code download ([`archive`]), and the `GIT_PROTOCOL` values the
//! real git programs are handed ([`protocol`]).

pub mod archive;
pub mod changeset;
pub mod patch;
pub mod paths;
pub mod protocol;
pub mod store;
