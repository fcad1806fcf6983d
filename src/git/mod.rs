//! Git hosting: every app owns one bare repository, reachable over smart HTTP (`http`) and SSH (`ssh`) through
//! the real git programs (`service`), readable in-process with gix (`store`), and writable without a client through
//! changesets (`changeset`, with the pure path, edit and hunk rules in `paths` and `patch`); `gc` collects them
//! daily.

pub mod archive;
pub mod changeset;
pub mod gc;
pub mod http;
pub mod patch;
pub mod paths;
pub mod service;
pub mod ssh;
pub mod store;
