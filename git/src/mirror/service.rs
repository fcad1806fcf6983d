//! What the mirror routes do (and what the MCP tools will do through the same functions): connect, read the
//! status, sync, disconnect, and the fetch each deploy of a connected app starts with. Callers have checked the
//! caller's role; these functions check the mirror's own state.

use slipway_git_store::Writing;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use russh::keys::PublicKey;
use serde::{Deserialize, Serialize};

use slipway_core::access::VisibleApp;
use slipway_core::error::ApiError;
use slipway_core::state::AppState;
use slipway_mirror_fetch::remote::{self, Host};
use slipway_mirror_fetch::{cluster, keys, resolve, transport, vet};
use slipway_store::db::mirrors::{self, Mirror, NewMirror};
use slipway_store::env::crypto::Sealed;

/// Git mirror status: when `connected` is false every other field is null.
#[derive(Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MirrorStatus {
    /// Whether an external repository is connected.
    pub connected: bool,
    /// Its SSH URL.
    pub remote_url: Option<String>,
    /// The deploy key's OpenSSH public line, to install on the external repository.
    pub public_key: Option<String>,
    /// When it was connected.
    pub connected_at: Option<DateTime<Utc>>,
    /// When the last sync ended.
    pub last_synced_at: Option<DateTime<Utc>>,
    /// `success` or `failed`; null before the first sync.
    pub last_sync_status: Option<String>,
    /// Why the last sync failed; null after a success.
    pub last_sync_error: Option<String>,
    /// Branches and tags (full ref name to 40-hex sha) after the last successful sync.
    pub last_sync_refs: Option<BTreeMap<String, String>>,
}

impl From<Option<Mirror>> for MirrorStatus {
    fn from(mirror: Option<Mirror>) -> Self {
        let Some(m) = mirror else {
            return Self::default();
        };
        Self {
            connected: true,
            remote_url: Some(m.remote_url),
            public_key: Some(m.public_key),
            connected_at: Some(m.connected_at),
            last_synced_at: m.last_synced_at,
            last_sync_status: m.last_sync_status,
            last_sync_error: m.last_sync_error,
            last_sync_refs: m.last_sync_refs.map(|refs| refs.0),
        }
    }
}

/// Connect response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Connected {
    /// The deploy key's OpenSSH public line: install it on the external repository with read access.
    pub public_key: String,
    /// The repository connected.
    pub remote_url: String,
}

/// The mirror status of `app`.
pub async fn status(state: &AppState, app: &VisibleApp) -> Result<MirrorStatus, ApiError> {
    Ok(mirrors::get(state.db(), app.id).await?.into())
}

/// Connects `app` to the repository at `remote_url` with a new deploy key; fetches nothing. 400 for anything but
/// an SSH URL (or an address literal no sync could reach), 409 when a mirror is connected already.
pub async fn connect(
    state: &AppState,
    app: &VisibleApp,
    remote_url: &str,
) -> Result<Connected, ApiError> {
    let remote_url = remote_url.trim();
    let remote = remote::parse(remote_url).map_err(ApiError::BadRequest)?;
    if let Host::Ip(ip) = remote.host {
        vet::Policy {
            allow: state.mirrors().config().allow.clone(),
            deny: Vec::new(),
        }
        .vet(&remote.host.to_string(), &[ip])
        .map_err(ApiError::BadRequest)?;
    }
    if mirrors::connected(state.db(), app.id).await? {
        return Err(already_connected());
    }
    let (key, public_key) = keys::generate(&format!(
        "{}/{}@{}",
        app.owner,
        app.name,
        state.names().git_host
    ))?;
    let sealed = keys::seal(state.keyring(), app.id, &key)?;
    let new = NewMirror {
        app_id: app.id,
        remote_url,
        public_key: &public_key,
        private_key_id: &sealed.key_id,
        private_key: &sealed.bytes,
    };
    let row = mirrors::insert(state.db(), &new)
        .await?
        .ok_or_else(already_connected)?;
    Ok(Connected {
        public_key: row.public_key,
        remote_url: row.remote_url,
    })
}

fn already_connected() -> ApiError {
    ApiError::Conflict(
        "this app is already connected to an external repository; disconnect it first".into(),
    )
}

/// Disconnects `app`: the deploy key is discarded; its repository and deploys stay as they are. 404 when none is
/// connected.
pub async fn disconnect(state: &AppState, app: &VisibleApp) -> Result<(), ApiError> {
    if mirrors::remove(state.db(), app.id).await? {
        Ok(())
    } else {
        Err(not_connected())
    }
}

fn not_connected() -> ApiError {
    ApiError::Missing(
        "not_found",
        "this app is not connected to an external repository".into(),
    )
}

/// Syncs `app` now and answers the status with the outcome (a failed sync is a status, not an error). 404 when
/// none is connected.
pub async fn sync(state: &AppState, app: &VisibleApp) -> Result<MirrorStatus, ApiError> {
    let mirror = mirrors::get(state.db(), app.id)
        .await?
        .ok_or_else(not_connected)?;
    Ok(run_sync(state, app, mirror).await?.into())
}

/// The fetch a deploy of `app` starts with, when a mirror is connected: 409 with the sync's error when it fails.
pub async fn fetch_before_deploy(state: &AppState, app: &VisibleApp) -> Result<(), ApiError> {
    let Some(mirror) = mirrors::get(state.db(), app.id).await? else {
        return Ok(());
    };
    match run_sync(state, app, mirror).await? {
        Some(m) if m.last_sync_status.as_deref() == Some("failed") => {
            Err(ApiError::Conflict(format!(
                "the fetch from the mirrored repository failed, so nothing was deployed: {}",
                m.last_sync_error.unwrap_or_default()
            )))
        }
        _ => Ok(()),
    }
}

/// Runs one sync of `mirror` as a job ([`super::job`]) and records the outcome; returns the row after it (`None`
/// when the app was disconnected meanwhile).
async fn run_sync(
    state: &AppState,
    app: &VisibleApp,
    mirror: Mirror,
) -> Result<Option<Mirror>, ApiError> {
    super::job::sync_and_wait(state, app, &mirror).await
}

/// Resolves and vets the server, opens the deploy key, fetches, and pins the host key on first contact.
pub(super) async fn sync_once(
    state: &AppState,
    mirror: &Mirror,
    repo: &std::path::Path,
) -> Result<BTreeMap<String, String>, String> {
    let config = state.mirrors().config();
    let remote = remote::parse(&mirror.remote_url)?;
    let addrs = match &remote.host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => resolve::addresses(name, config.dns_server).await?,
    };
    let mut deny: Vec<_> = config
        .deny
        .iter()
        .map(|net| (*net, "a network the platform refuses"))
        .collect();
    deny.extend(
        cluster::networks(state.kube())
            .await
            .map_err(|e| format!("{e:#}; the sync was not attempted"))?,
    );
    let policy = vet::Policy {
        allow: config.allow.clone(),
        deny,
    };
    policy.vet(&remote.host.to_string(), &addrs)?;
    let pinned = match &mirror.host_key {
        Some(line) => Some(
            PublicKey::from_openssh(line)
                .map_err(|e| format!("the pinned host key does not parse: {e}"))?,
        ),
        None => None,
    };
    let sealed = Sealed {
        key_id: mirror.private_key_id.clone(),
        bytes: mirror.private_key.clone(),
    };
    let key = keys::open(state.keyring(), mirror.app_id, &sealed).map_err(|e| {
        tracing::error!(app = %mirror.app_id, error = %e, "a mirror's deploy key does not open");
        "the deploy key cannot be opened (was the platform's keyring changed?); disconnect and connect again".to_owned()
    })?;
    let writer = state
        .repos()
        .writer(mirror.app_id, "mirror", Writing::Mirror)
        .await;
    let fetched = transport::fetch(transport::Fetch {
        remote: &remote,
        addrs: &addrs,
        key,
        pinned: pinned.clone(),
        repo,
        relay: &config.relay_program,
        publish: (&writer.config, &writer.env),
    })
    .await;
    if let (None, Some(seen)) = (&pinned, &fetched.host_key) {
        let line = seen
            .to_openssh()
            .map_err(|e| format!("the server's host key cannot be recorded: {e}"))?;
        mirrors::pin_host_key(state.db(), mirror.app_id, mirror.connected_at, &line)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "pinning a host key failed");
                "the server's host key could not be recorded; try again later".to_owned()
            })?;
    }
    fetched.outcome
}
