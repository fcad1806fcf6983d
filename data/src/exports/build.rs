//! Building one export's archive. The parts whose size is known only once they are written (the repository's
//! bundle, each database's dump) are streamed into the archive's bucket first, under the export's prefix; then the
//! `tar.gz` is streamed into the same bucket ([`slipway_tar_stream`]), its entries read back from those parts and,
//! for each bucket, from the channel's current objects through the gateway. Nothing is held in memory or on the
//! API's disk, whatever the size.
//!
//! The archive:
//!
//! - `export.json`: what the archive holds (app, channels, each part and why a part is absent);
//! - `env.json`: the variable names per channel as that channel resolves them (kind and scope, never a value);
//! - `repo.bundle`: `git bundle create --all` of the repository (absent when it has no commit); `git clone
//!   repo.bundle` makes a working copy;
//! - `channels/<name>/database.dump`: `pg_dump -Fc` of each non-static channel's database, for `pg_restore`;
//! - `channels/<name>/bucket/<key>`: each current object of the channel's bucket (key paths made safe as bucket
//!   downloads make them, [`slipway_blob::tarball::entry_name`]).

use std::path::Path;
use std::process::Stdio;

use bytes::Bytes;
use chrono::Utc;
use serde_json::{Value, json};
use slipway_backends::data_server::DumpFormat;
use slipway_crds::Template;
use uuid::Uuid;

use slipway_blob::bucket::Bucket;
use slipway_blob::checkpoints::Entry;
use slipway_core::access::VisibleApp;
use slipway_core::state::AppState;
use slipway_postgres::archive::Archive;

/// Why a build stopped: `reason` is shown to the person who asked, `cause` is logged.
#[derive(Debug)]
pub struct Failure {
    /// In words for the person who asked.
    pub reason: String,
    /// What went wrong, for the log.
    pub cause: anyhow::Error,
}

/// Attaches a reason for the person who asked to an error.
trait Reason<T> {
    fn reason(self, reason: impl FnOnce() -> String) -> Result<T, Failure>;
}

impl<T, E: Into<anyhow::Error>> Reason<T> for Result<T, E> {
    fn reason(self, reason: impl FnOnce() -> String) -> Result<T, Failure> {
        self.map_err(|e| Failure {
            reason: reason(),
            cause: e.into(),
        })
    }
}

/// One channel's parts.
struct ChannelPart {
    name: String,
    /// The staged dump's key and size; `None` with a note when there is none.
    dump: Option<(String, u64)>,
    /// The bucket and its current objects; `None` with a note when there is none.
    bucket: Option<(Bucket, Vec<Entry>)>,
    /// What `export.json` says of it.
    manifest: Value,
}

/// Builds the archive of `app` for export `id` under `prefix`; its key and size.
pub async fn build(
    state: &AppState,
    archive: &Archive,
    app: &VisibleApp,
    id: Uuid,
    prefix: &str,
) -> Result<(String, u64), Failure> {
    let started = Utc::now();
    let repo = app
        .ready_repo(state)
        .await
        .reason(|| "the repository could not be read; try again".to_owned())?;
    let bundle_key = format!("{prefix}parts/repo.bundle");
    let bundle = stage_bundle(archive, &repo, &bundle_key)
        .await
        .reason(|| {
            "the repository could not be bundled into object storage (git or object storage failed); try again"
                .to_owned()
        })?;
    let mut channels = Vec::new();
    for channel in app.channels(state) {
        channels.push(channel_part(state, archive, app, &channel, prefix).await?);
    }
    let env = env_names(state, app)
        .await
        .reason(|| "the variable names could not be read; try again".to_owned())?;
    let manifest = json!({
        "format": "slipway-export/1",
        "export_id": id,
        "created_at": started,
        "app": {"id": app.id, "name": app.name.as_str(), "owner": app.owner.as_str(),
                "template": app.app.spec.template},
        "repository": match bundle {
            Some(size) => json!({"file": "repo.bundle", "size_bytes": size}),
            None => json!({"file": null, "note": "the repository has no commit yet"}),
        },
        "env": "env.json",
        "channels": channels.iter().map(|c| c.manifest.clone()).collect::<Vec<_>>(),
    });
    let key = format!(
        "{prefix}{}-{}.tar.gz",
        app.name,
        started.format("%Y%m%dT%H%M%SZ")
    );
    let parts = archive.clone();
    let body = slipway_tar_stream::tar_gz(format!("export {id}"), move |tar| async move {
        tar.bytes("export.json", pretty(&manifest)?, started)
            .await?;
        tar.bytes("env.json", pretty(&env)?, started).await?;
        if let Some(size) = bundle {
            let body = parts.download(&bundle_key).await?;
            tar.file("repo.bundle", size, started, body).await?;
        }
        for channel in &channels {
            let dir = format!("channels/{}/", channel.name);
            tar.directory(&dir, started).await?;
            if let Some((key, size)) = &channel.dump {
                let body = parts.download(key).await?;
                tar.file(&format!("{dir}database.dump"), *size, started, body)
                    .await?;
            }
            if let Some((bucket, entries)) = &channel.bucket {
                let objects = format!("{dir}bucket/");
                tar.directory(&objects, started).await?;
                slipway_blob::tarball::append_all(&tar, bucket, entries, &objects, started).await?;
            }
        }
        Ok(())
    });
    let size = archive.upload(&key, body).await.reason(|| {
        "the archive could not be written (a part could not be read, an object changed while it was read, or object \
         storage did not answer); try again"
            .to_owned()
    })?;
    Ok((key, size))
}

fn pretty(value: &Value) -> anyhow::Result<Bytes> {
    Ok(Bytes::from(serde_json::to_vec_pretty(value)?))
}

/// Streams `git bundle create - --all` of `repo` into `key`; its size, or `None` for a repository with no commit.
async fn stage_bundle(archive: &Archive, repo: &Path, key: &str) -> anyhow::Result<Option<u64>> {
    let any_ref = tokio::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["for-each-ref", "--count=1", "--format=x"])
        .env_remove("GIT_DIR")
        .stdin(Stdio::null())
        .output()
        .await?;
    anyhow::ensure!(
        any_ref.status.success(),
        "git for-each-ref failed in {}",
        repo.display()
    );
    if any_ref.stdout.is_empty() {
        return Ok(None);
    }
    let mut command = tokio::process::Command::new("git");
    command
        .arg("--git-dir")
        .arg(repo)
        .args(["bundle", "create", "--quiet", "-", "--all"])
        .env_remove("GIT_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let body = slipway_postgres::stream::stdout_of(command, "git bundle")?;
    Ok(Some(archive.upload(key, body).await?))
}

/// A channel's dump (staged) and bucket listing, or notes on why either is absent.
async fn channel_part(
    state: &AppState,
    archive: &Archive,
    app: &VisibleApp,
    channel: &slipway_crds::Channel,
    prefix: &str,
) -> Result<ChannelPart, Failure> {
    let name = channel.channel_name().to_owned();
    let id: Uuid = channel
        .metadata
        .uid
        .as_deref()
        .and_then(|u| u.parse().ok())
        .ok_or_else(|| Failure {
            reason: format!("channel {name} is not fully created yet; try again shortly"),
            cause: anyhow::anyhow!("channel {name} has no uid"),
        })?;
    let dir = format!("channels/{name}/");
    let mut database = json!({"file": null});
    let mut dump = None;
    if app.app.spec.template == Template::Static {
        database["note"] = json!("static channels have no database");
    } else {
        match database_of(state, channel, id).await {
            Some((server, record)) => {
                let key = format!("{prefix}parts/{id}.dump");
                let command = server.dump_command(&record.db_name, DumpFormat::Custom);
                let staged = async {
                    let body = slipway_postgres::stream::stdout_of(command, "pg_dump")?;
                    Ok::<_, anyhow::Error>(archive.upload(&key, body).await?)
                };
                let size = staged.await.reason(|| {
                    format!(
                        "the database of channel {name} could not be dumped into object storage (the data server or \
                         object storage did not answer); try again"
                    )
                })?;
                database = json!({"file": format!("{dir}database.dump"), "format": "pg_dump custom (pg_restore)",
                                  "db_name": record.db_name, "size_bytes": size});
                dump = Some((key, size));
            }
            None => {
                database["note"] =
                    json!("the channel's database is not ready (nothing to dump yet)")
            }
        }
    }
    let mut objects = json!({"directory": null});
    let mut listed = None;
    match bucket_of(state, id).await {
        Ok(Some(bucket)) => {
            let listing = slipway_blob::checkpoints::list_now(&bucket)
                .await
                .reason(|| {
                    format!("the bucket of channel {name} could not be listed; try again")
                })?;
            let bytes: i64 = listing.entries.iter().map(|e| e.size_bytes).sum();
            objects = json!({"directory": format!("{dir}bucket/"), "bucket": bucket.name,
                             "objects": listing.entries.len(), "bytes": bytes});
            listed = Some((bucket, listing.entries));
        }
        Ok(None) => {
            objects["note"] =
                json!("the channel has no bucket (object storage is off or not ready)")
        }
        Err(e) => {
            return Err(e)
                .reason(|| format!("the bucket of channel {name} could not be opened; try again"));
        }
    }
    let manifest = json!({
        "name": name,
        "id": id,
        "git_ref_binding": channel.spec.git_ref_binding,
        "current_sha": channel.status.as_ref().and_then(|s| s.current_sha.clone()),
        "database": database,
        "bucket": objects,
    });
    Ok(ChannelPart {
        name,
        dump,
        bucket: listed,
        manifest,
    })
}

/// The data server and the channel's ready database, if it has one.
async fn database_of<'s>(
    state: &'s AppState,
    channel: &slipway_crds::Channel,
    id: Uuid,
) -> Option<(
    &'s slipway_backends::data_server::DataServer,
    slipway_postgres::store::Record,
)> {
    let server = state.data_server()?;
    let record = slipway_core::channel_database::ready_record(channel, id, state)
        .await
        .ok()?;
    Some((server, record))
}

/// The channel's bucket through the gateway; `None` without object storage or a recorded store.
async fn bucket_of(state: &AppState, id: Uuid) -> anyhow::Result<Option<Bucket>> {
    let Some(access) = state.blob_access() else {
        return Ok(None);
    };
    let Some(store) = slipway_blob::store::by_channel(state.db(), id).await? else {
        return Ok(None);
    };
    Ok(Some(access.bucket(state.keyring(), &store)?))
}

/// `env.json`: per channel, the names it resolves (app defaults merged with its overrides), each with its kind and
/// scope; the app level alone under `app`. Never a value.
async fn env_names(state: &AppState, app: &VisibleApp) -> anyhow::Result<Value> {
    let mut channels = serde_json::Map::new();
    for channel in app.channels(state) {
        let Some(id) = channel.metadata.uid.as_deref().and_then(|u| u.parse().ok()) else {
            continue;
        };
        let names = names_of(state, app, Some((id, channel.spec.env_secret.as_deref()))).await?;
        channels.insert(channel.channel_name().to_owned(), names);
    }
    Ok(json!({"app": names_of(state, app, None).await?, "channels": channels}))
}

/// The names (with kind and scope) the app level, or a channel, resolves.
async fn names_of(
    state: &AppState,
    app: &VisibleApp,
    channel: Option<(Uuid, Option<&str>)>,
) -> anyhow::Result<Value> {
    let sources = slipway_store::env::EnvSources {
        app_id: app.id,
        namespace: &app.namespace,
        app_secret: app.app.spec.env_secret.as_deref(),
        channel,
    };
    let (entries, _warnings) =
        slipway_store::env::resolve_sources(state.db(), state.kube(), state.keyring(), &sources)
            .await?;
    Ok(entries
        .into_iter()
        .map(|e| json!({"key": e.key, "kind": e.kind, "scope": e.scope}))
        .collect())
}
