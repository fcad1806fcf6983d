//! Mirroring an external git repository into an app's own repository over SSH.
//!
//! The owner connects a repository by its SSH URL and gets the public half of a fresh Ed25519 deploy key to install
//! there; the private half is sealed with the env keyring and never leaves the API. Each sync (the sync route, and
//! every deploy of a connected app first) resolves the server's name, refuses the whole answer if any address is
//! one a user must not make the platform reach ([`slipway_mirror_fetch::vet`]), connects to a checked address itself, pins the server's
//! host key on first contact and refuses a changed one, and lets the real `git fetch` pull every branch and tag
//! over that connection ([`slipway_mirror_fetch::transport`]). The external repository is authoritative: a force-push there rewrites the
//! branch here, a deleted branch goes. While connected, pushes and changesets are refused, so the two cannot
//! diverge. Each sync runs as a job of the platform ([`job`]): the syncs of one app run one at a time on whichever
//! API replica claims them, and outlive the request that asked.

pub mod job;
pub mod service;

use uuid::Uuid;

use slipway_core::error::ApiError;
use slipway_core::state::AppState;

/// Why commits to `app` by push or changeset are refused, if they are: its commits come from the external
/// repository it is connected to.
pub async fn commits_refused(state: &AppState, app: Uuid) -> Result<Option<String>, ApiError> {
    Ok(slipway_store::db::mirrors::connected(state.db(), app)
        .await?
        .then(|| {
            "this app mirrors an external repository: commit there and sync, or disconnect the mirror first"
                .to_owned()
        }))
}
