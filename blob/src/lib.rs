//! Object storage per channel: a versioned bucket on an S3 backend, reached by tenants only through the platform's
//! own S3 gateway.
//!
//! - [`gateway`] is the S3 service (`slipway s3`, [`serve`]): SigV4 with each channel's own key pair, the
//!   channel's virtual bucket mapped onto its backend bucket, versioning kept on, the owner's byte quota enforced.
//!   [`front`] is what every request gets around s3s (request ids, the presigned URLs refused before it),
//!   [`passthrough`] is its lean path for plain GETs, HEADs, PUTs and DELETEs of objects and their parts ([`trailer`]
//!   chunks a body again for a client's trailing checksum), [`sdk`] its SDK client for
//!   every other operation, [`tenants`] what it keeps per access key, [`quota`] how its writes reserve and count
//!   their bytes, and [`lease`] the slices of quota its small writes take from.
//! - [`store`] holds each channel's store in the platform database (the key pair, the secret sealed like env
//!   secrets) and the usage counted against the quota; [`recount`] corrects it from the backend's listing.
//! - [`keys`] mints key pairs.
//! - [`bucket`] is a channel's bucket as the API server works on it (through the gateway, with the channel's key
//!   pair); [`checkpoints`] records the object-store leg of checkpoints and prunes versions no checkpoint needs;
//!   [`restore`] copies a bucket forward to a checkpoint and [`tarball`] streams one as a `tar.gz`.
//! - [`access`] is what the API server needs: the status and credentials routes probe the store through the
//!   gateway with the channel's own key pair, so a working answer means the whole path works.
//!
//! The bucket's lifecycle (made with the channel, removed with it) is the Channel reconciler's
//! (`slipway_controllers::blob`), which asks the API server to record and forget stores. The
//! backend's command-line options belong to the binary, whose operator and API server both read them.

pub mod access;
pub mod bucket;
pub mod checkpoints;
pub mod front;
pub mod gateway;
pub mod keys;
pub mod lease;
pub mod metrics;
pub mod passthrough;
pub mod quota;
pub mod recount;
pub mod restore;
pub mod sdk;
pub mod serve;
pub mod store;
pub mod tarball;
pub mod tenants;
pub mod trailer;
