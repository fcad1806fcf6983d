//! Object storage for tests: a versitygw backend of the test's own and the platform's S3 gateway in process, on
//! the test's platform database and keyring, with the API told where the gateway is.

use std::net::SocketAddr;

use anyhow::Result;
use serde_json::Value;
use slipway_backends::object_store::{self, Backend, S3Endpoint};
use slipway_controllers::blob::BlobSettings;
use slipway_testkit::s3::TestS3;

use super::TestApi;

/// A backend and a gateway in front of it.
pub struct ObjectStore {
    /// The backend (a test may pause and resume it).
    pub backend: TestS3,
    /// Where the gateway listens.
    pub gateway: SocketAddr,
    /// The gateway's base URL.
    pub gateway_url: String,
}

impl ObjectStore {
    /// Starts a backend on loopback and a gateway on `gateway_host` (`127.0.0.1`, or the node host address when
    /// pods must reach it), and points `api` at the gateway.
    pub async fn start(api: &mut TestApi, gateway_host: &str) -> Result<Self> {
        let store = Self::start_unannounced(api, gateway_host).await?;
        store.announce(api);
        Ok(store)
    }

    /// [`ObjectStore::start`] without telling `api` (its object-storage routes answer 503 and its checkpoints have
    /// no bucket leg until [`ObjectStore::announce`]).
    pub async fn start_unannounced(api: &TestApi, gateway_host: &str) -> Result<Self> {
        let backend = TestS3::start().await?;
        let db = slipway_store::db::connect(api.db_url()).await?;
        let ring = slipway_store::env::crypto::Keyring::parse(&api.keyring_line)?;
        let service = slipway_blob::serve::service(db, ring, &super::s3_calls::root(&backend)).s3;
        let listener = tokio::net::TcpListener::bind((gateway_host, 0)).await?;
        let gateway = listener.local_addr()?;
        tokio::spawn(slipway_blob::serve::serve(
            service,
            listener,
            std::future::pending(),
        ));
        Ok(Self {
            backend,
            gateway,
            gateway_url: format!("http://{gateway}"),
        })
    }

    /// Points `api` at the gateway.
    pub fn announce(&self, api: &mut TestApi) {
        api.enable(|features| {
            features.blob_access = Some(slipway_blob::access::BlobAccess {
                gateway_url: self.gateway_url.clone(),
            })
        });
    }

    /// The operator's settings: this backend, and the gateway as `S3_ENDPOINT`.
    pub fn settings(&self) -> BlobSettings {
        BlobSettings {
            backend: Backend::new(&super::s3_calls::root(&self.backend)),
            bucket_prefix: "slipway-".into(),
            pod_endpoint: self.gateway_url.clone(),
        }
    }

    /// An S3 client of the gateway with a channel's key pair.
    pub fn client(&self, access_key_id: &str, secret_access_key: &str) -> aws_sdk_s3::Client {
        object_store::client(
            &S3Endpoint {
                url: self.gateway_url.clone(),
                access_key_id: access_key_id.into(),
                secret_access_key: secret_access_key.into(),
            },
            None,
        )
    }

    /// An S3 client of the backend itself, with its root key pair (what tenants never get).
    pub fn backend_client(&self) -> aws_sdk_s3::Client {
        object_store::client(&super::s3_calls::root(&self.backend), None)
    }
}

/// A channel's bucket and key pair, as the credentials route answers them.
pub struct Keys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub bucket: String,
}

impl Keys {
    /// The keys in an answer of `POST .../blob/credentials`.
    pub fn from_credentials(body: &Value) -> Self {
        let field = |name: &str| body[name].as_str().unwrap_or_default().to_owned();
        Self {
            access_key_id: field("access_key_id"),
            secret_access_key: field("secret_access_key"),
            bucket: field("bucket"),
        }
    }
}

/// Runs `tests/s3/boto3_client.py ARGS...` against `endpoint` with `keys`, resolving the host `resolve` names to
/// its address (a public endpoint's name exists only in the test); returns the line it printed ("ok...", or
/// "error <status> <code>"). A crash of the client is an error.
pub async fn boto3(
    args: &[&str],
    endpoint: &str,
    resolve: Option<(&str, &str)>,
    keys: &Keys,
) -> Result<String> {
    let mut command = tokio::process::Command::new("python3");
    command
        .arg(super::platform::root().join("tests/s3/boto3_client.py"))
        .args(args)
        .env("S3_ENDPOINT", endpoint)
        .env("S3_BUCKET", &keys.bucket)
        .env("S3_ACCESS_KEY_ID", &keys.access_key_id)
        .env("S3_SECRET_ACCESS_KEY", &keys.secret_access_key)
        .kill_on_drop(true);
    if let Some((host, ip)) = resolve {
        command.env("SLIPWAY_RESOLVE", format!("{host}={ip}")).env(
            "PYTHONPATH",
            super::platform::root().join("tests/s3/resolve"),
        );
    }
    let out = command.output().await?;
    anyhow::ensure!(
        out.status.success(),
        "boto3 client {args:?} crashed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
