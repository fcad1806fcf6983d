//! What travels on the internal routes: their paths and the JSON bodies of requests and answers, shared by the
//! client ([`crate::client`]) and the API server's handlers so the two cannot drift apart.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Prefix of every internal route.
pub const PREFIX: &str = "/internal/v1";

/// Body of `PUT /internal/v1/deploys/{deploy_id}/env`.
#[derive(Debug, Serialize, Deserialize)]
pub struct EnvRequest {
    /// The app's id.
    pub app_id: String,
    /// The channel's id.
    pub channel_id: String,
    /// Keys the operator injects itself, recorded by name only.
    pub system_keys: Vec<String>,
}

/// Answer of `PUT /internal/v1/deploys/{deploy_id}/env`: the values the deploy runs with.
#[derive(Debug, Serialize, Deserialize)]
pub struct EnvResponse {
    /// Resolved user env (app defaults, channel overrides, GitOps Secrets), by key.
    pub env: BTreeMap<String, String>,
}

/// Answer of `GET /internal/v1/apps/{app_id}/commits/{rev}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct CommitResponse {
    /// The 40-hex commit id.
    pub sha: String,
}

/// Body of `POST /internal/v1/apps/{app_id}/source-urls`: the commit a build pod is to fetch.
#[derive(Debug, Serialize, Deserialize)]
pub struct SourceUrlRequest {
    /// The 40-hex commit id.
    pub sha: String,
}

/// Answer of `POST /internal/v1/apps/{app_id}/source-urls`.
#[derive(Debug, Serialize, Deserialize)]
pub struct SourceUrlResponse {
    /// Path and query of the signed archive URL on the internal listener (`/internal/v1/apps/.../archive/...?
    /// expires=...&signature=...`); the caller puts the listener's address in front.
    pub path: String,
    /// When the signature stops being accepted, in seconds since the Unix epoch.
    pub expires: u64,
}

/// Body of `PUT /internal/v1/channels/{channel_id}/blob`: the operator made the channel's backend bucket and asks
/// the API server, which owns the keyring, to record the store and mint its sealed key pair.
#[derive(Debug, Serialize, Deserialize)]
pub struct BlobStoreRequest {
    /// The channel's app.
    pub app_id: String,
    /// The backend bucket the operator made for the channel (kept if the store already names one).
    pub backend_bucket: String,
}

/// Answer of `PUT /internal/v1/channels/{channel_id}/blob`.
#[derive(Debug, Serialize, Deserialize)]
pub struct BlobStoreResponse {
    /// The backend bucket of the store (the one recorded first).
    pub backend_bucket: String,
    /// The bucket name clients use.
    pub virtual_bucket: String,
    /// The channel's access key id.
    pub access_key_id: String,
}

/// Answer of `GET /internal/v1/channels/{channel_id}/blob/credentials`: what a deploy's containers receive.
#[derive(Debug, Serialize, Deserialize)]
pub struct BlobCredentials {
    /// The bucket name clients use (`S3_BUCKET`).
    pub bucket: String,
    /// `S3_ACCESS_KEY_ID`.
    pub access_key_id: String,
    /// `S3_SECRET_ACCESS_KEY`.
    pub secret_access_key: String,
}

/// Body of `POST /internal/v1/usage/bandwidth`: what an edge sent since its last report, added up by the API
/// server into each account's monthly bandwidth (`GET /me/usage`).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BandwidthReport {
    /// Bytes sent per username since the last report.
    pub bytes: BTreeMap<String, u64>,
}

/// Body of `PUT /internal/v1/channels/{channel_id}/postgres`: the operator asks the API server, which owns the
/// keyring, to record the channel's database (its names and sealed passwords) before it provisions it.
#[derive(Debug, Serialize, Deserialize)]
pub struct DatabaseRequest {
    /// The channel's app.
    pub app_id: String,
}

/// Answer of `PUT` and `GET /internal/v1/channels/{channel_id}/postgres`: the channel's database, its two roles
/// and their passwords (what provisioning sets and what a deploy's containers receive).
#[derive(Serialize, Deserialize)]
pub struct DatabaseRecord {
    /// The database.
    pub db_name: String,
    /// The write role (owner of the database).
    pub role_name: String,
    /// The read-only role.
    pub readonly_role_name: String,
    /// The write role's password.
    pub password: String,
    /// The read-only role's password.
    pub readonly_password: String,
}

/// Body of `PUT /internal/v1/deploys/{deploy_id}/postgres-snapshot`: the operator asks for the deploy's
/// `pre_deploy` snapshot before it starts the deploy's new container (one per deploy; a repeated call answers the
/// one taken).
#[derive(Debug, Serialize, Deserialize)]
pub struct PreDeploySnapshotRequest {
    /// The channel's app.
    pub app_id: String,
    /// The channel.
    pub channel_id: String,
    /// The commit running now (the one before the deploy); `None` on a channel's first deploy.
    pub git_sha: Option<String>,
}

/// Answer of `PUT /internal/v1/deploys/{deploy_id}/postgres-snapshot`.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PreDeploySnapshot {
    /// The snapshot is stored.
    Taken {
        /// Its id.
        snapshot_id: String,
    },
    /// There is nothing to snapshot or nowhere to keep it (no database yet, no object storage): the deploy goes
    /// on.
    Skipped {
        /// Why.
        reason: String,
    },
    /// The dump failed: the deploy must not start a container that may migrate data nobody saved.
    Failed {
        /// Why.
        reason: String,
    },
    /// The checkpoint runs (as a job of the API's, which goes on whoever asks): ask again.
    Running {
        /// How far it is, in words: "1.2 GiB of 2.5 GiB, 38 s", "queued".
        progress: String,
    },
}

/// Body of `PUT /internal/v1/runtime/containers/{container_id}`: the operator's log archive records a generation of
/// a channel's app container (an instance: a restart or a new deploy's pod is a new one) and its state as its pod
/// reports it. Repeated whenever the pod changes; a generation that ended stays ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeContainer {
    /// The channel's app.
    pub app_id: String,
    /// The channel.
    pub channel_id: String,
    /// The pod the instance runs (ran) in.
    pub pod_name: String,
    /// The deploy whose pod it is.
    pub deploy_id: Option<String>,
    /// Whether it is running.
    pub running: bool,
    /// `running`, `waiting` or `exited`.
    pub status: String,
    /// The process's exit code, once it ended.
    pub exit_code: Option<i32>,
    /// Whether the kernel killed it for passing its memory limit.
    pub oom_killed: bool,
    /// When it started.
    pub started_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// When it ended.
    pub finished_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// Body of `POST /internal/v1/runtime/settle`: every app container instance the operator's archive sees in a full
/// list of the app pods. A generation still recorded as running that is not among them ended while no archive
/// watched (its pod was deleted meanwhile), and is recorded as ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeSettle {
    /// The runtime's ids of the instances the pods show.
    pub container_ids: Vec<String>,
}

/// Answer of `PUT /internal/v1/runtime/containers/{container_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeContainerRecord {
    /// The generation's number in its channel.
    pub container_index: i32,
    /// Whether the generation ended (its output is complete once the follower drained it).
    pub finished: bool,
    /// The RFC 3339 timestamp of the last line kept: a follower resuming skips lines up to it.
    pub last_timestamp: Option<String>,
}

impl std::fmt::Debug for DatabaseRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseRecord")
            .field("db_name", &self.db_name)
            .field("role_name", &self.role_name)
            .field("readonly_role_name", &self.readonly_role_name)
            .finish_non_exhaustive()
    }
}
