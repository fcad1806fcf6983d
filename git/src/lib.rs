//! Git hosting: every app owns one bare repository, reachable over smart HTTP (`http`) and SSH (`ssh`) through
//! the real git programs (`service`), checked against the caller's access; `gc` collects them daily. What is done
//! to a repository itself, without a caller, is [`slipway_repository`]. [`mirror`] connects an app to an external
//! repository it then mirrors; while connected, pushes and changesets are refused here.

pub mod gc;
pub mod http;
pub mod mirror;
pub mod service;
pub mod ssh;
