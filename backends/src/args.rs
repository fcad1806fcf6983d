//! The flags that name the two backends, as both the operator and the API server take them: the data server's
//! admin connection ([`DataServerArgs`]) and the object store with the platform's root key pair
//! ([`S3BackendArgs`]). Each role adds its own on top (the operator, where pods reach them); the values are checked
//! here once, so a misconfigured install fails at start with the flag's name.

use std::sync::Arc;

use crate::data_server::DataServer;
use crate::object_store::{self, S3Endpoint};

/// The data server's admin connection. Without an admin URL channels get no database and the database routes
/// answer 503 postgres_unavailable, which suits clusters that run slipway without SQL databases.
#[derive(Debug, Clone, clap::Args)]
pub struct DataServerArgs {
    /// Admin URL of the data server that holds the channels' databases
    /// (`postgres://USER:PASSWORD@HOST:PORT/postgres`, a superuser; from the environment, since a flag would show
    /// in the process list). Unset: channels get no database.
    #[arg(long, env = "SLIPWAY_DATA_SERVER_URL", hide_env_values = true)]
    pub data_server_url: Option<String>,
}

impl DataServerArgs {
    /// The data server these options name; `None` without a URL.
    pub fn server(&self) -> anyhow::Result<Option<Arc<DataServer>>> {
        let Some(url) = &self.data_server_url else {
            return Ok(None);
        };
        Ok(Some(Arc::new(DataServer::new(url)?)))
    }
}

/// The object-storage backend and the platform's root key pair on it. Without a backend URL channels get no bucket
/// and no snapshots are taken, which suits clusters that run slipway without object storage.
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
            object_store::valid_bucket_prefix(&self.s3_bucket_prefix),
            "--s3-bucket-prefix must be at most {} lowercase letters, digits and '-', starting with a letter or digit",
            object_store::MAX_BUCKET_PREFIX
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
