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
