//! Platform backup and restore (`slipway admin backup`, `slipway admin restore`): the state slipway itself keeps,
//! in one file, brought back into a fresh install.
//!
//! A backup holds:
//! - `database.dump`: the platform database, `pg_dump --format=custom`, taken first (it is the source of truth
//!   every other part is read against);
//! - `objects.json`: every App, Channel, Domain, Forward and Deploy, with its status ([`cluster`]);
//! - `secrets.json`: the env keyring, end-user sign-in's keys, the certificates and ACME account key, and the env
//!   Secrets Apps and Channels name;
//! - `data.tar`: every app's repository and the SSH host key ([`pod`]): the api's volume, or with repositories in
//!   object storage a copy of every pack of the git bucket;
//! - `manifest.json`: what the file holds and when it was taken.
//!
//! Channel databases (on the data server) and the channels' bucket contents (in the object store) are not in it: they live in
//! systems the platform team runs and backs up with their own tools, and a restore finds them where they were.
//!
//! The command runs where `kubectl` does, with the caller's credentials. What only the api pod reaches (the
//! database URL, the data volume) it takes through the pod's exec stream, running `slipway admin backup-part` there;
//! the Secrets it reads itself, so the api's ServiceAccount stays without them. A restore is the same path
//! backwards into a release just installed: the operator is held at 0 replicas while the state goes in (it would
//! otherwise act on Channels whose status is not back yet), and the api and edge restart to read the restored
//! keyring, sign-in keys and host key. The operator's Deployment notes the replicas it had while it is held, so a
//! restore killed half-way and run again puts those back rather than the 0 it finds.

mod archive;
mod cluster;
pub mod pod;
mod rekey;
mod release;

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use chrono::Utc;
use kube::Client;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use archive::{ArchiveReader, ArchiveWriter};
use release::Release;

/// The format of the file this build writes; a restore refuses a newer one.
const FORMAT: u32 = 1;

/// What a backup file holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The file's format ([`FORMAT`] when this build wrote it).
    pub format: u32,
    /// The version of slipway that wrote it.
    pub slipway_version: String,
    /// When the backup was finished.
    pub created_at: chrono::DateTime<Utc>,
    /// The release's namespace.
    pub namespace: String,
    /// The Helm release.
    pub release: String,
    /// How many cluster objects of each kind.
    pub objects: Vec<(String, usize)>,
    /// How many Secrets.
    pub secrets: usize,
    /// The size of the database dump.
    pub database_bytes: u64,
    /// The size of the repositories' tar.
    pub data_bytes: u64,
}

/// The Secrets a backup holds, by their role in the platform.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Secrets {
    keyring: Option<Value>,
    sign_in: Option<Value>,
    certificates: Vec<Value>,
    env: Vec<Value>,
}

impl Secrets {
    fn count(&self) -> usize {
        usize::from(self.keyring.is_some())
            + usize::from(self.sign_in.is_some())
            + self.certificates.len()
            + self.env.len()
    }
}

fn step(started: Instant, what: impl std::fmt::Display) {
    eprintln!("[{:>5.1}s] {what}", started.elapsed().as_secs_f64());
}

fn bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    }
}

/// `counts` as a progress line says them: `3 App, 3 Channel, ...`.
fn listed(counts: &[(String, usize)]) -> String {
    counts
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes a backup of release `release` in `namespace` to `output`, which must not exist yet.
pub async fn backup(
    client: &Client,
    namespace: &str,
    release: &str,
    output: &Path,
) -> anyhow::Result<Manifest> {
    let started = Instant::now();
    let release = Release::find(client, namespace, release).await?;
    let mut file = ArchiveWriter::create(output).await?;
    let written = async {
        step(started, "dumping the platform database");
        let database_bytes = release
            .exec_out(&["backup-part", "database"], |out| {
                file.entry("database.dump", out)
            })
            .await?;
        step(
            started,
            format!("platform database: {}", bytes(database_bytes)),
        );

        let objects = cluster::objects(client).await?;
        let mut secrets = Secrets {
            keyring: Some(release.secret(&release.keyring_secret).await?),
            ..Secrets::default()
        };
        if let Some(name) = &release.sign_in_secret {
            secrets.sign_in = Some(release.secret(name).await?);
        }
        secrets.certificates = release.certificates().await?;
        secrets.env = cluster::env_secrets(client, &objects).await?;
        let counts = cluster::counts(&objects);
        file.bytes("objects.json", &serde_json::to_vec(&objects)?)
            .await?;
        file.bytes("secrets.json", &serde_json::to_vec(&secrets)?)
            .await?;
        step(
            started,
            format!(
                "cluster objects: {}; {} Secrets",
                listed(&counts),
                secrets.count()
            ),
        );

        step(started, "copying the repositories and the SSH host key");
        let data_bytes = release
            .exec_out(&["backup-part", "data"], |out| file.entry("data.tar", out))
            .await?;
        step(started, format!("repositories: {}", bytes(data_bytes)));

        let manifest = Manifest {
            format: FORMAT,
            slipway_version: env!("CARGO_PKG_VERSION").to_owned(),
            created_at: Utc::now(),
            namespace: namespace.to_owned(),
            release: release.name.clone(),
            objects: counts,
            secrets: secrets.count(),
            database_bytes,
            data_bytes,
        };
        file.bytes("manifest.json", &serde_json::to_vec_pretty(&manifest)?)
            .await?;
        anyhow::Ok(manifest)
    }
    .await;
    match written {
        Ok(manifest) => {
            let size = file.finish().await?;
            step(
                started,
                format!("wrote {} ({})", output.display(), bytes(size)),
            );
            Ok(manifest)
        }
        Err(e) => {
            file.abandon().await;
            Err(e)
        }
    }
}

/// Brings the backup at `input` back into release `release` in `namespace`, a fresh install with an empty platform
/// database and no apps.
pub async fn restore(
    client: &Client,
    namespace: &str,
    release: &str,
    input: &Path,
) -> anyhow::Result<Manifest> {
    let started = Instant::now();
    let file = ArchiveReader::open(input).await?;
    let manifest: Manifest = serde_json::from_slice(&file.bytes("manifest.json").await?)
        .context("read the backup's manifest")?;
    if manifest.format > FORMAT {
        bail!(
            "the backup is of format {} (slipway {}); this slipway reads format {FORMAT} and older",
            manifest.format,
            manifest.slipway_version
        );
    }
    let objects: Vec<Value> = serde_json::from_slice(&file.bytes("objects.json").await?)?;
    let secrets: Secrets = serde_json::from_slice(&file.bytes("secrets.json").await?)?;
    let release = Release::find(client, namespace, release).await?;
    // A restore killed while it held the operator left it at 0 replicas; run again, it goes on where the install
    // is still fresh, and otherwise says how to start over.
    let cut_short = release
        .held_by_a_cut_restore()
        .map_or_else(String::new, |replicas| {
            format!(
                "; a restore was cut short here and left the operator held at 0 replicas (it had {replicas}): \
                 install afresh and restore again"
            )
        });
    if let Some(app) = release.any_app().await? {
        bail!(
            "the cluster already has apps ({app}): a backup is restored into a fresh install only{cut_short}"
        );
    }
    release
        .exec_check(&["restore-check"])
        .await
        .map_err(|e| anyhow::anyhow!("{e:#}{cut_short}"))?;
    step(
        started,
        format!(
            "restoring the backup of {} taken {} (slipway {})",
            manifest.release, manifest.created_at, manifest.slipway_version
        ),
    );

    let operator = release.hold_operator().await?;
    step(started, "operator held at 0 replicas");
    let restored = async {
        if let Some(keyring) = &secrets.keyring {
            cluster::put_secret(client, keyring, namespace, &release.keyring_secret).await?;
        }
        if let (Some(sign_in), Some(name)) = (&secrets.sign_in, &release.sign_in_secret) {
            cluster::put_secret(client, sign_in, namespace, name).await?;
        }
        if let Some(certificates) = &release.certificate_namespace {
            for secret in &secrets.certificates {
                let name = secret["metadata"]["name"].as_str().unwrap_or_default();
                cluster::put_secret(client, secret, certificates, name).await?;
            }
        }
        step(
            started,
            format!("{} Secrets put back", secrets.count() - secrets.env.len()),
        );

        release
            .exec_in(&["restore-part", "data"], file.reader("data.tar").await?)
            .await?;
        step(started, "repositories and SSH host key restored");
        release
            .exec_in(
                &["restore-part", "database"],
                file.reader("database.dump").await?,
            )
            .await?;
        step(started, "platform database restored");

        for secret in &secrets.env {
            let namespace = secret["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = secret["metadata"]["name"].as_str().unwrap_or_default();
            cluster::put_secret(client, secret, namespace, name).await?;
        }
        let (counts, ids) = cluster::create(client, &objects).await?;
        let keyring = secrets
            .keyring
            .as_ref()
            .and_then(|k| k["data"]["keys"].as_str())
            .context("the backup holds no env keyring")?;
        let keyring = String::from_utf8(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, keyring)
                .context("the backup's keyring")?,
        )?;
        let moves = serde_json::to_vec(&rekey::Moves { keyring, ids })?;
        release
            .exec_in(&["restore-part", "ids"], &moves[..])
            .await?;
        step(
            started,
            format!(
                "cluster objects created: {}; {} env Secrets",
                listed(&counts),
                secrets.env.len()
            ),
        );
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = restored {
        // The operator comes back whatever happened: a restore cut short is to be seen, not left with nothing
        // reconciling the cluster.
        release.release_operator(operator).await?;
        return Err(e);
    }
    // The api and edge read the restored keyring, sign-in keys and host key at start; the operator's first deploys
    // ask the api for their environment, so it comes back after the api.
    let restarted = async {
        release
            .restart(json!(Utc::now().to_rfc3339()))
            .await
            .context("restart the api and edge")?;
        step(started, "api and edge restarted; waiting for the api");
        release.wait_for_api().await?;
        cluster::redeploy_live(client, &objects).await
    }
    .await;
    release.release_operator(operator).await?;
    step(
        started,
        format!(
            "{} live app versions queued to start again from their images",
            restarted?
        ),
    );
    step(
        started,
        "restored; the operator now brings every channel back",
    );
    Ok(manifest)
}
