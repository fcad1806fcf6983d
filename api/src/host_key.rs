//! The SSH host key every api replica serves, kept in a Secret of the release (`--ssh-host-key-secret`), so that
//! clients see one key whichever replica answers, and a pod on a new node or a new volume keeps it.
//!
//! The chart creates the Secret empty and keeps what is put in it. On the first start the key already on the data
//! volume (an installation from before the Secret) goes in, or else a new Ed25519 key. The write names the Secret's
//! resourceVersion, so of replicas starting together one key wins and the others read it back. The key is also
//! written to the data volume's file, where a platform backup takes it from, and a restore puts the backup's key
//! back into the Secret ([`store`]).

use std::path::Path;

use anyhow::{Context, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use slipway_git::ssh::{self, PrivateKey};

/// The Secret's key that holds the host key (OpenSSH text).
pub const DATA_KEY: &str = "ssh_host_ed25519_key";

/// Writes to the Secret that lost to another replica's, before giving up.
const ATTEMPTS: usize = 5;

/// A Secret named `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretName {
    /// Its namespace (the release's).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::str::FromStr for SecretName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => Ok(Self {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            }),
            _ => Err(format!("{s:?} is not <namespace>/<name>")),
        }
    }
}

impl std::fmt::Display for SecretName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The host key in `secret`, put there first if it holds none: the key at `file`, or a new one. `file` ends up
/// holding the same key.
pub async fn load(
    client: &kube::Client,
    secret: &SecretName,
    file: &Path,
) -> anyhow::Result<PrivateKey> {
    let key = settle(client, secret, || {
        Ok(match ssh::read_host_key(file)? {
            Some(key) => (key, "the data volume's key"),
            None => (ssh::new_host_key(), "a new key"),
        })
    })
    .await?;
    let on_file = ssh::read_host_key(file).ok().flatten();
    if on_file.as_ref().map(PrivateKey::public_key) != Some(key.public_key()) {
        ssh::write_host_key(file, &key)?;
    }
    Ok(key)
}

/// Puts `key` into `secret` in place of the key there (a restore bringing back the backup's key).
pub async fn store(
    client: &kube::Client,
    secret: &SecretName,
    key: &PrivateKey,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
    for _ in 0..ATTEMPTS {
        let current = get(&secrets, secret).await?;
        if replace(&secrets, secret, current, key).await? {
            return Ok(());
        }
    }
    bail!("the Secret {secret} kept changing while the SSH host key was written")
}

/// The key in `secret`, or the one `first` gives (with where it came from) written there when it holds none and no
/// other writer got there first.
async fn settle(
    client: &kube::Client,
    secret: &SecretName,
    first: impl Fn() -> anyhow::Result<(PrivateKey, &'static str)>,
) -> anyhow::Result<PrivateKey> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
    for _ in 0..ATTEMPTS {
        let current = get(&secrets, secret).await?;
        if let Some(text) = current.data.as_ref().and_then(|d| d.get(DATA_KEY)) {
            let text = std::str::from_utf8(&text.0).context("the SSH host key is not text")?;
            return ssh::parse_host_key(text).with_context(|| format!("the host key in {secret}"));
        }
        let (key, from) = first()?;
        // A replica that wrote first makes this write lose, and the next round reads its key.
        if replace(&secrets, secret, current, &key).await? {
            tracing::info!(secret = %secret, from, "put the SSH host key into the Secret");
            return Ok(key);
        }
    }
    bail!("the Secret {secret} kept changing while the SSH host key was settled")
}

async fn get(secrets: &Api<Secret>, secret: &SecretName) -> anyhow::Result<Secret> {
    secrets
        .get_opt(&secret.name)
        .await
        .with_context(|| format!("read the Secret {secret}"))?
        .with_context(|| format!("the Secret {secret} for the SSH host key does not exist"))
}

/// Writes `key` into `current` as it was read (its resourceVersion included); false when another writer changed
/// the Secret since.
async fn replace(
    secrets: &Api<Secret>,
    secret: &SecretName,
    mut current: Secret,
    key: &PrivateKey,
) -> anyhow::Result<bool> {
    current.data.get_or_insert_default().insert(
        DATA_KEY.to_owned(),
        ByteString(ssh::host_key_text(key)?.into_bytes()),
    );
    match secrets
        .replace(&secret.name, &PostParams::default(), &current)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e).with_context(|| format!("write the SSH host key into {secret}")),
    }
}
