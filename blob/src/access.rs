//! Object storage as the API server reaches it: through the gateway, signed with the channel's own key pair, the
//! way an app does. A probe that passes shows the gateway, the platform database and the backend all answer for
//! that channel; the API holds no backend credentials.

use std::time::Duration;

use slipway_backends::object_store::{self, S3Endpoint};

use super::store::Store;
use slipway_store::env::crypto::Keyring;

/// Longest a probe may take before the store counts as unavailable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the API server reaches the gateway.
#[derive(Debug, Clone)]
pub struct BlobAccess {
    /// Base URL of the gateway as the API reaches it, e.g. `http://slipway-s3.slipway-system.svc:7480`.
    pub gateway_url: String,
}

/// A channel's public S3 endpoint: `https://<channel hostname label>.s3.<app domain>`.
pub fn public_endpoint(host_label: &str, app_domain: &str) -> String {
    format!("https://{host_label}.s3.{app_domain}")
}

impl BlobAccess {
    /// Asks the gateway for the channel's bucket with the channel's own key pair; the failure, described.
    pub async fn probe(&self, ring: &Keyring, store: &Store) -> Result<(), ProbeFailure> {
        let secret = store
            .secret(ring)
            .map_err(|e| ProbeFailure::Unanswered(e.to_string()))?;
        let client = object_store::client(
            &S3Endpoint {
                url: self.gateway_url.clone(),
                access_key_id: store.access_key_id.clone(),
                secret_access_key: secret,
            },
            Some(PROBE_TIMEOUT),
        );
        client
            .head_bucket()
            .bucket(&store.virtual_bucket)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| {
                let status = e.raw_response().map(|r| r.status().as_u16());
                let detail = object_store::describe(&e);
                if status == Some(404) {
                    ProbeFailure::NoBucket(detail)
                } else {
                    ProbeFailure::Unanswered(detail)
                }
            })
    }
}

/// Why a probe failed.
#[derive(Debug)]
pub enum ProbeFailure {
    /// The gateway and backend answered, and the channel's bucket is not there (yet).
    NoBucket(String),
    /// No answer for the channel: the gateway, the platform database or the backend is down or too slow.
    Unanswered(String),
}
