//! The operator's (and the edge's) client for the API server's internal endpoints (`/internal/v1/...`). The API
//! server owns the git store and the platform database; reconcilers reach both through these few calls, so no
//! other component mounts the repositories or holds the env keyring.
//!
//! Every call carries the platform's internal token. A build pod gets no token: it fetches its sources through an
//! archive URL signed with the token ([`sign_archive`]), valid for one commit of one app until it expires.

pub mod blob;
pub mod usage;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};

/// How long a signed archive URL stays valid.
pub const ARCHIVE_URL_LIFETIME: Duration = Duration::from_secs(3600);

/// Where the API server is and the secret the components share with it.
#[derive(Debug, Clone)]
pub struct PlatformEndpoints {
    /// Base URL of the API server as this process reaches it, e.g. `http://slipway-api.slipway-system.svc`.
    pub api_url: String,
    /// Base URL of the API server as pods on the cluster reach it (build pods fetch their sources there).
    pub pod_api_url: String,
    /// The internal token (`Authorization: Bearer` on `/internal/v1`, and the key of archive URL signatures).
    pub internal_token: String,
}

/// What went wrong talking to the API server.
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    /// The API server answered 404: the app, commit or deploy does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Anything else: unreachable, 5xx, bad body. Worth a retry.
    #[error("platform API: {0}")]
    Unavailable(String),
}

/// Signature of an archive URL: HMAC-SHA256 over `<app_id>/<sha>/<expires>` keyed by the internal token, in hex.
pub fn sign_archive(token: &str, app_id: &str, sha: &str, expires: u64) -> String {
    // HMAC takes a key of any length.
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(format!("{app_id}/{sha}/{expires}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Checks an archive URL's signature and expiry in constant time.
pub fn verify_archive(token: &str, app_id: &str, sha: &str, expires: u64, signature: &str) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if expires < now {
        return false;
    }
    let Ok(given) = hex::decode(signature) else {
        return false;
    };
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(format!("{app_id}/{sha}/{expires}").as_bytes());
    mac.verify_slice(&given).is_ok()
}

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

/// Client of the internal endpoints.
#[derive(Clone)]
pub struct PlatformApi {
    endpoints: PlatformEndpoints,
    http: reqwest::Client,
}

impl PlatformApi {
    /// A client for `endpoints`.
    pub fn new(endpoints: PlatformEndpoints) -> Self {
        // The process's TLS provider is ring (as for the kube client); installing it again is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Self { endpoints, http }
    }

    /// The endpoints this client talks to.
    pub fn endpoints(&self) -> &PlatformEndpoints {
        &self.endpoints
    }

    fn url(&self, path: &str) -> String {
        format!(
            "{}/internal/v1{path}",
            self.endpoints.api_url.trim_end_matches('/')
        )
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, PlatformError> {
        let res = req
            .bearer_auth(&self.endpoints.internal_token)
            .send()
            .await
            .map_err(|e| PlatformError::Unavailable(e.to_string()))?;
        let status = res.status();
        if status.is_success() {
            return Ok(res);
        }
        let body = res.text().await.unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or(body);
        if status == reqwest::StatusCode::NOT_FOUND {
            Err(PlatformError::NotFound(message))
        } else {
            Err(PlatformError::Unavailable(format!("{status}: {message}")))
        }
    }

    /// Resolves `rev` (a 40-hex commit, a branch name, or `refs/heads/<branch>`) in the app's repository.
    pub async fn resolve(&self, app_id: &str, rev: &str) -> Result<String, PlatformError> {
        let mut url = reqwest::Url::parse(&self.url(&format!("/apps/{app_id}/commits/")))
            .map_err(|e| PlatformError::Unavailable(e.to_string()))?;
        url.path_segments_mut()
            .map_err(|()| PlatformError::Unavailable("base URL cannot take a path".into()))?
            .pop_if_empty()
            .push(rev);
        let res = self.send(self.http.get(url)).await?;
        let body: CommitResponse = res
            .json()
            .await
            .map_err(|e| PlatformError::Unavailable(e.to_string()))?;
        Ok(body.sha)
    }

    /// Records the deploy's env snapshot (once; later calls read it back) and returns the values it runs with.
    pub async fn deploy_env(
        &self,
        deploy_id: &str,
        request: &EnvRequest,
    ) -> Result<BTreeMap<String, String>, PlatformError> {
        let res = self
            .send(
                self.http
                    .put(self.url(&format!("/deploys/{deploy_id}/env")))
                    .json(request),
            )
            .await?;
        let body: EnvResponse = res
            .json()
            .await
            .map_err(|e| PlatformError::Unavailable(e.to_string()))?;
        Ok(body.env)
    }

    /// Appends `text` to the deploy's log (kept after build pods are gone).
    pub async fn append_log(&self, deploy_id: &str, text: &str) -> Result<(), PlatformError> {
        self.send(
            self.http
                .post(self.url(&format!("/deploys/{deploy_id}/log")))
                .header(reqwest::header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(text.to_owned()),
        )
        .await?;
        Ok(())
    }

    /// The tar of a commit's files, streamed (for the edge's static cache).
    pub async fn archive(
        &self,
        app_id: &str,
        sha: &str,
    ) -> Result<reqwest::Response, PlatformError> {
        self.send(
            self.http
                .get(self.url(&format!("/apps/{app_id}/archive/{sha}"))),
        )
        .await
    }

    /// A URL a pod can fetch the commit's tar from without a token, valid for [`ARCHIVE_URL_LIFETIME`].
    pub fn signed_archive_url(&self, app_id: &str, sha: &str) -> String {
        let expires = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            + ARCHIVE_URL_LIFETIME.as_secs();
        let signature = sign_archive(&self.endpoints.internal_token, app_id, sha, expires);
        format!(
            "{}/internal/v1/apps/{app_id}/archive/{sha}?expires={expires}&signature={signature}",
            self.endpoints.pod_api_url.trim_end_matches('/')
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_commit_and_until_it_expires() {
        let far = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 600;
        let sig = sign_archive("k", "app", "abc", far);
        assert!(verify_archive("k", "app", "abc", far, &sig));
        assert!(
            !verify_archive("k", "app", "abd", far, &sig),
            "another commit"
        );
        assert!(
            !verify_archive("k", "other", "abc", far, &sig),
            "another app"
        );
        assert!(
            !verify_archive("other-key", "app", "abc", far, &sig),
            "another key"
        );
        assert!(
            !verify_archive("k", "app", "abc", far + 1, &sig),
            "another expiry"
        );
        assert!(!verify_archive("k", "app", "abc", far, "zz"), "not hex");
        let past = 1_000;
        let old = sign_archive("k", "app", "abc", past);
        assert!(!verify_archive("k", "app", "abc", past, &old), "expired");
    }
}
