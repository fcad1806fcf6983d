//! Where the object-storage backend is, as the operator (it makes and removes channel buckets there) and the API
//! server (it keeps SQL snapshot files in the platform's own bucket there) are told, and where pods reach the
//! gateway (`S3_ENDPOINT`). Without a backend URL channels get no bucket and no snapshots are taken, which suits
//! clusters that run slipway without object storage.

use slipway_backends::object_store::{Backend, S3Endpoint};
use slipway_controllers::blob::{self, BlobSettings};

/// The backend and the platform's root key pair on it.
#[derive(Debug, Clone, clap::Args)]
pub struct S3BackendArgs {
    /// URL of the S3 backend that holds the channels' buckets. Unset: channels get no bucket.
    #[arg(long, env = "SLIPWAY_S3_BACKEND_URL")]
    pub s3_backend_url: Option<String>,
    /// The backend's access key id.
    #[arg(long, env = "SLIPWAY_S3_BACKEND_ACCESS_KEY_ID", default_value = "")]
    pub s3_backend_access_key_id: String,
    /// The backend's secret access key (from the environment; a flag would show in the process list).
    #[arg(
        long,
        env = "SLIPWAY_S3_BACKEND_SECRET_ACCESS_KEY",
        hide_env_values = true,
        default_value = ""
    )]
    pub s3_backend_secret_access_key: String,
    /// Prefix of backend bucket names (`<prefix><channel uid>`, and `<prefix>system` for the platform's own
    /// files), so installations can share a backend.
    #[arg(long, env = "SLIPWAY_S3_BUCKET_PREFIX", default_value = "slipway-")]
    pub s3_bucket_prefix: String,
}

impl S3BackendArgs {
    /// The endpoint these options name (checked); `None` without a backend URL.
    pub fn endpoint(&self) -> anyhow::Result<Option<S3Endpoint>> {
        let Some(url) = &self.s3_backend_url else {
            return Ok(None);
        };
        anyhow::ensure!(
            blob::valid_bucket_prefix(&self.s3_bucket_prefix),
            "--s3-bucket-prefix must be at most {} lowercase letters, digits and '-', starting with a letter or digit",
            blob::MAX_BUCKET_PREFIX
        );
        anyhow::ensure!(
            !self.s3_backend_access_key_id.is_empty()
                && !self.s3_backend_secret_access_key.is_empty(),
            "the backend's key pair (SLIPWAY_S3_BACKEND_ACCESS_KEY_ID, SLIPWAY_S3_BACKEND_SECRET_ACCESS_KEY) is needed with --s3-backend-url"
        );
        Ok(Some(S3Endpoint {
            url: url.clone(),
            access_key_id: self.s3_backend_access_key_id.clone(),
            secret_access_key: self.s3_backend_secret_access_key.clone(),
        }))
    }
}

/// Object-storage options of `slipway operator`.
#[derive(Debug, clap::Args)]
pub struct BlobOperatorArgs {
    /// The backend.
    #[command(flatten)]
    pub backend: S3BackendArgs,
    /// The gateway (`slipway s3`) as pods reach it: the `S3_ENDPOINT` apps get, e.g.
    /// `http://slipway-s3.slipway-system.svc:7480`.
    #[arg(long, env = "SLIPWAY_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
}

impl BlobOperatorArgs {
    /// The settings these options name; `None` without a backend.
    pub fn settings(&self) -> anyhow::Result<Option<BlobSettings>> {
        let Some(endpoint) = self.backend.endpoint()? else {
            return Ok(None);
        };
        let pod_endpoint = self.s3_endpoint.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "--s3-endpoint (the gateway as pods reach it) is needed with --s3-backend-url"
            )
        })?;
        Ok(Some(BlobSettings {
            backend: Backend::new(&endpoint),
            bucket_prefix: self.backend.s3_bucket_prefix.clone(),
            pod_endpoint,
        }))
    }
}
