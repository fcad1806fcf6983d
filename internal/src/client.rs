//! The client of the API server's internal listener, used by the operator and the edge. Every call presents the
//! caller's ServiceAccount token ([`TokenSource`]), read afresh when the kubelet rotates it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::protocol::{
    BandwidthReport, BlobCredentials, BlobStoreRequest, BlobStoreResponse, CommitResponse,
    DatabaseRecord, DatabaseRequest, EnvRequest, EnvResponse, PREFIX, PreDeploySnapshot,
    PreDeploySnapshotRequest, RuntimeContainer, RuntimeContainerRecord, RuntimeSettle,
    SourceUrlRequest, SourceUrlResponse,
};
use crate::token::TokenSource;

/// Where the internal listener is and how this caller proves who it is.
#[derive(Debug, Clone)]
pub struct InternalEndpoint {
    /// Base URL of the API server's internal listener, e.g. `http://slipway-api-internal.slipway-system.svc:8081`.
    pub url: String,
    /// The caller's token.
    pub token: TokenSource,
}

impl InternalEndpoint {
    /// The listener at `url`, called with the token in `token_file` (read again whenever it changes); fails now
    /// when the file cannot be read, rather than at the first call.
    pub fn with_token_file(url: String, token_file: &std::path::Path) -> std::io::Result<Self> {
        let token = TokenSource::file(token_file);
        token.token()?;
        Ok(Self { url, token })
    }
}

/// What went wrong calling the internal listener.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The API server answered 404: the app, commit or deploy does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Anything else: unreachable, refused (401, 403), 5xx, bad body, no token. Worth a retry.
    #[error("internal API: {0}")]
    Unavailable(String),
}

fn unavailable(e: impl std::fmt::Display) -> CallError {
    CallError::Unavailable(e.to_string())
}

/// Client of the internal routes.
#[derive(Clone)]
pub struct InternalClient {
    endpoint: InternalEndpoint,
    http: reqwest::Client,
}

impl InternalClient {
    /// A client for `endpoint`.
    pub fn new(endpoint: InternalEndpoint) -> Self {
        // The process's TLS provider is ring (as for the kube client); installing it again is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Self { endpoint, http }
    }

    /// The endpoint this client talks to.
    pub fn endpoint(&self) -> &InternalEndpoint {
        &self.endpoint
    }

    fn url(&self, path: &str) -> String {
        format!("{}{PREFIX}{path}", self.endpoint.url.trim_end_matches('/'))
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, CallError> {
        let token = self.endpoint.token.token().map_err(unavailable)?;
        let res = req.bearer_auth(&*token).send().await.map_err(unavailable)?;
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
            Err(CallError::NotFound(message))
        } else {
            Err(CallError::Unavailable(format!("{status}: {message}")))
        }
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        self.send(req).await?.json().await.map_err(unavailable)
    }

    /// Resolves `rev` (a 40-hex commit, a branch name, or `refs/heads/<branch>`) in the app's repository.
    pub async fn resolve(&self, app_id: &str, rev: &str) -> Result<String, CallError> {
        let mut url = reqwest::Url::parse(&self.url(&format!("/apps/{app_id}/commits/")))
            .map_err(unavailable)?;
        url.path_segments_mut()
            .map_err(|()| unavailable("base URL cannot take a path"))?
            .pop_if_empty()
            .push(rev);
        let body: CommitResponse = self.json(self.http.get(url)).await?;
        Ok(body.sha)
    }

    /// Records the deploy's env snapshot (once; later calls read it back) and returns the values it runs with.
    pub async fn deploy_env(
        &self,
        deploy_id: &str,
        request: &EnvRequest,
    ) -> Result<BTreeMap<String, String>, CallError> {
        let req = self
            .http
            .put(self.url(&format!("/deploys/{deploy_id}/env")))
            .json(request);
        let body: EnvResponse = self.json(req).await?;
        Ok(body.env)
    }

    /// Appends `text` to the deploy's log (kept after build pods are gone).
    pub async fn append_log(&self, deploy_id: &str, text: &str) -> Result<(), CallError> {
        self.send(
            self.http
                .post(self.url(&format!("/deploys/{deploy_id}/log")))
                .header(reqwest::header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(text.to_owned()),
        )
        .await?;
        Ok(())
    }

    /// The tar of a commit's files, streamed.
    pub async fn archive(&self, app_id: &str, sha: &str) -> Result<reqwest::Response, CallError> {
        self.send(
            self.http
                .get(self.url(&format!("/apps/{app_id}/archive/{sha}"))),
        )
        .await
    }

    /// Path and query of a URL that opens the tar of `sha` of the app without a token for an hour; the caller
    /// puts the internal listener's address as its pods reach it in front.
    pub async fn source_url(
        &self,
        app_id: &str,
        sha: &str,
    ) -> Result<SourceUrlResponse, CallError> {
        let req = self
            .http
            .post(self.url(&format!("/apps/{app_id}/source-urls")))
            .json(&SourceUrlRequest {
                sha: sha.to_owned(),
            });
        self.json(req).await
    }

    /// Records the channel's object store (once; later calls answer the same store).
    pub async fn ensure_blob_store(
        &self,
        channel_id: &str,
        request: &BlobStoreRequest,
    ) -> Result<BlobStoreResponse, CallError> {
        let req = self
            .http
            .put(self.url(&format!("/channels/{channel_id}/blob")))
            .json(request);
        self.json(req).await
    }

    /// Forgets the channel's object store (its bucket is gone); a store that is not there is already forgotten.
    pub async fn delete_blob_store(&self, channel_id: &str) -> Result<(), CallError> {
        let req = self
            .http
            .delete(self.url(&format!("/channels/{channel_id}/blob")));
        match self.send(req).await {
            Ok(_) | Err(CallError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The channel's bucket and key pair, for a deploy's containers.
    pub async fn blob_credentials(&self, channel_id: &str) -> Result<BlobCredentials, CallError> {
        let req = self
            .http
            .get(self.url(&format!("/channels/{channel_id}/blob/credentials")));
        self.json(req).await
    }

    /// Records the channel's database (once; later calls answer the same names and passwords).
    pub async fn ensure_database(
        &self,
        channel_id: &str,
        request: &DatabaseRequest,
    ) -> Result<DatabaseRecord, CallError> {
        let req = self
            .http
            .put(self.url(&format!("/channels/{channel_id}/postgres")))
            .json(request);
        self.json(req).await
    }

    /// The channel's recorded database, with its roles' passwords.
    pub async fn database(&self, channel_id: &str) -> Result<DatabaseRecord, CallError> {
        let req = self
            .http
            .get(self.url(&format!("/channels/{channel_id}/postgres")));
        self.json(req).await
    }

    /// Forgets the channel's database (it is dropped); one that is not recorded is already forgotten.
    pub async fn delete_database(&self, channel_id: &str) -> Result<(), CallError> {
        let req = self
            .http
            .delete(self.url(&format!("/channels/{channel_id}/postgres")));
        match self.send(req).await {
            Ok(_) | Err(CallError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Starts the deploy's `pre_deploy` checkpoint (once; later calls answer the same) and answers how it is: done,
    /// skipped, failed, or still running (ask again).
    pub async fn pre_deploy_snapshot(
        &self,
        deploy_id: &str,
        request: &PreDeploySnapshotRequest,
    ) -> Result<PreDeploySnapshot, CallError> {
        let req = self
            .http
            .put(self.url(&format!("/deploys/{deploy_id}/postgres-snapshot")))
            .json(request);
        self.json(req).await
    }

    /// Stops the deploy's `pre_deploy` checkpoint if it still runs (the deploy gave up on it).
    pub async fn cancel_pre_deploy_snapshot(&self, deploy_id: &str) -> Result<(), CallError> {
        let req = self
            .http
            .delete(self.url(&format!("/deploys/{deploy_id}/postgres-snapshot")));
        match self.send(req).await {
            Ok(_) | Err(CallError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Records a container generation of a channel (or its new state); `NotFound` when the app is gone.
    pub async fn runtime_container(
        &self,
        container_id: &str,
        facts: &RuntimeContainer,
    ) -> Result<RuntimeContainerRecord, CallError> {
        let req = self
            .http
            .put(self.url(&format!("/runtime/containers/{container_id}")))
            .json(facts);
        self.json(req).await
    }

    /// Records as ended every running generation whose instance is not in `settle` (a full list of the app pods'
    /// instances); answers how many.
    pub async fn settle_runtime_containers(
        &self,
        settle: &RuntimeSettle,
    ) -> Result<u64, CallError> {
        let req = self.http.post(self.url("/runtime/settle")).json(settle);
        self.json(req).await
    }

    /// Appends whole output lines, each starting with its RFC 3339 timestamp, to a recorded generation;
    /// `NotFound` when the generation is not (or no longer) recorded.
    pub async fn append_runtime_log(
        &self,
        container_id: &str,
        lines: Vec<u8>,
    ) -> Result<(), CallError> {
        self.send(
            self.http
                .post(self.url(&format!("/runtime/containers/{container_id}/log")))
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(lines),
        )
        .await?;
        Ok(())
    }

    /// Adds an edge's report to the accounts' monthly bandwidth.
    pub async fn report_bandwidth(&self, report: &BandwidthReport) -> Result<(), CallError> {
        self.send(self.http.post(self.url("/usage/bandwidth")).json(report))
            .await?;
        Ok(())
    }
}
