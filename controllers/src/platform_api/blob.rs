//! The internal calls of object storage: the operator asks the API server, which owns the platform database and
//! the keyring, to record a channel's store (minting its sealed key pair), to forget it once the bucket is gone,
//! and for the key pair a deploy's containers receive. The operator never holds the keyring.

use serde::{Deserialize, Serialize};

use super::{PlatformApi, PlatformError};

/// Body of `PUT /internal/v1/channels/{channel_id}/blob`.
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

impl PlatformApi {
    /// Records the channel's store (once; later calls answer the same store).
    pub async fn ensure_blob_store(
        &self,
        channel_id: &str,
        request: &BlobStoreRequest,
    ) -> Result<BlobStoreResponse, PlatformError> {
        let res = self
            .send(
                self.http
                    .put(self.url(&format!("/channels/{channel_id}/blob")))
                    .json(request),
            )
            .await?;
        res.json()
            .await
            .map_err(|e| PlatformError::Unavailable(e.to_string()))
    }

    /// Forgets the channel's store (its bucket is gone); a store that is not there is already forgotten.
    pub async fn delete_blob_store(&self, channel_id: &str) -> Result<(), PlatformError> {
        match self
            .send(
                self.http
                    .delete(self.url(&format!("/channels/{channel_id}/blob"))),
            )
            .await
        {
            Ok(_) | Err(PlatformError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The channel's bucket and key pair, for a deploy's containers.
    pub async fn blob_credentials(
        &self,
        channel_id: &str,
    ) -> Result<BlobCredentials, PlatformError> {
        let res = self
            .send(
                self.http
                    .get(self.url(&format!("/channels/{channel_id}/blob/credentials"))),
            )
            .await?;
        res.json()
            .await
            .map_err(|e| PlatformError::Unavailable(e.to_string()))
    }
}
