//! The SSH host key every api replica serves, kept in a Secret (`api/src/host_key.rs`), against the real apiserver:
//! replicas starting together settle on one key, an installation upgraded from the key file keeps its key, the
//! Secret wins over a volume holding another key (and the file follows it), and a restore puts a key back.

use std::path::Path;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use slipway_api::host_key::{self, DATA_KEY, SecretName};
use slipway_git::ssh;
use slipway_testkit::setup;
use slipway_testkit::tls::TempDir;

/// An empty Secret in `namespace`, as the chart makes it.
async fn empty_secret(client: &kube::Client, namespace: &str, name: &str) -> Result<SecretName> {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
    }))?;
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await?;
    format!("{namespace}/{name}")
        .parse()
        .map_err(anyhow::Error::msg)
}

/// The key the Secret holds, as its public key's OpenSSH line.
async fn in_secret(client: &kube::Client, secret: &SecretName) -> Result<String> {
    let held = Api::<Secret>::namespaced(client.clone(), &secret.namespace)
        .get(&secret.name)
        .await?;
    let text = held
        .data
        .unwrap_or_default()
        .remove(DATA_KEY)
        .context("the Secret holds no key")?;
    public(&ssh::parse_host_key(std::str::from_utf8(&text.0)?)?)
}

fn public(key: &ssh::PrivateKey) -> Result<String> {
    Ok(key.public_key().to_openssh()?)
}

fn on_file(file: &Path) -> Result<String> {
    public(&ssh::read_host_key(file)?.context("no key on file")?)
}

#[tokio::test]
async fn replicas_starting_together_settle_on_one_host_key_in_the_secret() -> Result<()> {
    let (client, ns) = setup("hostkey-race").await?;
    let secret = empty_secret(&client, ns.name(), "ssh-host-key").await?;
    let dirs: Vec<TempDir> = (0..4)
        .map(|_| TempDir::new("hostkey"))
        .collect::<Result<_>>()?;
    // Four replicas, each with a volume of its own and no key on it, start at once.
    let loads = dirs.iter().map(|dir| {
        let (client, secret) = (client.clone(), secret.clone());
        let file = dir.path().join("ssh/ssh_host_ed25519_key");
        async move {
            host_key::load(&client, &secret, &file)
                .await
                .map(|k| (k, file))
        }
    });
    let loaded = futures::future::try_join_all(loads).await?;
    let held = in_secret(&client, &secret).await?;
    for (key, file) in &loaded {
        assert_eq!(public(key)?, held, "every replica serves the Secret's key");
        assert_eq!(on_file(file)?, held, "and keeps it on its volume");
    }
    // Started again (a restart, a new node), a replica finds the same key.
    let again = TempDir::new("hostkey")?;
    let key = host_key::load(&client, &secret, &again.path().join("key")).await?;
    assert_eq!(public(&key)?, held);
    Ok(())
}

#[tokio::test]
async fn the_volume_s_key_goes_into_an_empty_secret_and_otherwise_the_secret_wins() -> Result<()> {
    let (client, ns) = setup("hostkey-keep").await?;
    // An installation from before the Secret: its key is on the data volume.
    let dir = TempDir::new("hostkey")?;
    let file = dir.path().join("ssh/ssh_host_ed25519_key");
    let old = ssh::load_or_create_host_key(&file)?;
    let secret = empty_secret(&client, ns.name(), "ssh-host-key").await?;
    let key = host_key::load(&client, &secret, &file).await?;
    assert_eq!(
        public(&key)?,
        public(&old)?,
        "the installation keeps its key"
    );
    assert_eq!(in_secret(&client, &secret).await?, public(&old)?);

    // A volume holding another key (a replica's new volume restored from elsewhere) takes the Secret's.
    let other = TempDir::new("hostkey")?;
    let other_file = other.path().join("key");
    ssh::write_host_key(&other_file, &ssh::new_host_key())?;
    let key = host_key::load(&client, &secret, &other_file).await?;
    assert_eq!(public(&key)?, public(&old)?);
    assert_eq!(on_file(&other_file)?, public(&old)?);

    // A restore puts the backup's key in its place.
    let restored = ssh::new_host_key();
    host_key::store(&client, &secret, &restored).await?;
    assert_eq!(in_secret(&client, &secret).await?, public(&restored)?);
    assert_eq!(
        public(&host_key::load(&client, &secret, &file).await?)?,
        public(&restored)?
    );
    assert_eq!(on_file(&file)?, public(&restored)?);

    // A Secret that is not there is a clear error, and no key is made.
    let missing: SecretName = format!("{}/nothing-here", ns.name())
        .parse()
        .map_err(anyhow::Error::msg)?;
    let empty = TempDir::new("hostkey")?;
    let error = host_key::load(&client, &missing, &empty.path().join("key"))
        .await
        .unwrap_err();
    assert!(
        format!("{error:#}").contains("for the SSH host key does not exist"),
        "{error:#}"
    );
    assert!(!empty.path().join("key").exists());
    Ok(())
}
