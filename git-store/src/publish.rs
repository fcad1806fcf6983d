//! Publishing a ref update of a repository kept in object storage: the one write path of pushes, changesets and
//! mirror syncs. git's hooks ([`crate::hook`]) hand the updates over a Unix socket; the objects they need that no
//! ref of the cache already reaches (a push's still in its quarantine) are uploaded to the bucket as packs (a push's
//! received packs as they are, mostly sent already while git received them, the rest packed with
//! `git pack-objects`), and only then do the refs move in the database with one compare-and-swap per ref
//! ([`git_refs::publish`]). The answer decides whether git writes the refs into the cache.
//!
//! A crash after the database moved and before git wrote the cache loses nothing: every replica, this one
//! included, syncs its cache from the database before it serves the repository again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use slipway_store::db::git_refs::{self, Check, PackRow, PublishError, RefUpdate};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use crate::hook::{Grant, Writing};
use crate::{ObjectStorage, Outage};

/// The object id git writes for "no object".
const ZERO: &str = "0000000000000000000000000000000000000000";

/// Largest hook message read (a push of many refs sends one line each).
const MAX_MESSAGE: u64 = 16 << 20;

/// Serves the hook's socket until the process ends.
pub(crate) async fn serve(storage: Arc<ObjectStorage>, listener: UnixListener) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "git hook socket: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let storage = storage.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(&storage, stream).await {
                tracing::warn!(error = %e, "git hook socket: answering failed");
            }
        });
    }
}

async fn answer(storage: &ObjectStorage, mut stream: UnixStream) -> anyhow::Result<()> {
    let mut message = String::new();
    (&mut stream)
        .take(MAX_MESSAGE + 1)
        .read_to_string(&mut message)
        .await?;
    if message.len() as u64 > MAX_MESSAGE {
        // Read the rest, so that the hook is not cut off mid-write and shows the reason.
        tokio::io::copy(&mut stream, &mut tokio::io::sink()).await?;
        let reply = format!(
            "refused the update names more refs than one transaction may ({} MiB of ref lines); push them in parts\n",
            MAX_MESSAGE >> 20
        );
        stream.write_all(reply.as_bytes()).await?;
        stream.shutdown().await?;
        return Ok(());
    }
    let mut parts = message.splitn(3, '\n');
    let (grant, quarantine, updates) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let reply = match storage.grants.open(grant) {
        None => "refused this git process may not update refs\n".to_owned(),
        Some(grant) => match publish(storage, &grant, quarantine, updates).await {
            Ok(()) => "ok\n".to_owned(),
            Err(reason) => format!("refused {}\n", reason.replace('\n', " ")),
        },
    };
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await?;
    Ok(())
}

/// The updates of a hook's stdin that publish anything: refs under `refs/` (not the `HEAD` symref line, and not a
/// name outside `refs/`, which receive-pack refuses itself). A line with no object on either side is a mirror's
/// prune (`fetch --prune` deletes whatever the ref was), and otherwise only the echo of a nested `packed-refs`
/// transaction, which is left out. A name git cannot write refuses the whole update: receive-pack checks names
/// only after `pre-receive`, where a push publishes.
pub(crate) fn parse_updates(text: &str, writing: Writing) -> Result<Vec<RefUpdate>, String> {
    let mut updates = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.splitn(3, ' ');
        let (Some(old), Some(new), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "a ref update line is not `<old> <new> <ref>`: {line:?}"
            ));
        };
        if !name.starts_with("refs/") || (old == ZERO && new == ZERO && writing != Writing::Mirror)
        {
            continue;
        }
        if !crate::is_ref_name(name) {
            return Err(format!("refusing to create funny ref {name:?}"));
        }
        let oid = |s: &str| -> Result<Option<String>, String> {
            if s.len() != 40 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("not an object id: {s:?}"));
            }
            Ok((s != ZERO).then(|| s.to_ascii_lowercase()))
        };
        updates.push(RefUpdate {
            name: name.to_owned(),
            old: oid(old)?,
            new: oid(new)?,
        });
    }
    Ok(updates)
}

/// Publishes the hook's updates for `grant`, with the objects of a push's `quarantine` (a directory inside the
/// repository's `objects`); the reason git is to be told when they are refused.
async fn publish(
    storage: &ObjectStorage,
    grant: &Grant,
    quarantine: &str,
    text: &str,
) -> Result<(), String> {
    let updates = parse_updates(text, grant.writing)?;
    if updates.is_empty() {
        return Ok(());
    }
    let path = storage.cache_path(grant.app);
    let quarantine = match quarantine.trim() {
        "" => None,
        q => Some(inside_objects(&path, q)?),
    };
    let fault = |e: anyhow::Error| {
        if let Some(outage) = Outage::of(&e) {
            tracing::warn!(app = %grant.app, error = format!("{e:#}"), "a ref update found its storage unavailable");
            if let Some(hold) = storage.hold_of(grant.writer) {
                hold.note(outage);
            }
            return "the repository's storage is unavailable; nothing was updated, try again shortly".to_owned();
        }
        tracing::error!(app = %grant.app, error = format!("{e:#}"), "publishing a ref update failed");
        "the repository's storage failed; nothing was updated, try again".to_owned()
    };
    if grant.writing == Writing::Push
        && let Some(hold) = storage.hold_of(grant.writer)
    {
        let lock = storage.cache_lock(&path);
        match tokio::time::timeout(crate::cache::LOCK_WAIT, lock.read_owned()).await {
            Ok(guard) => hold.take(guard),
            Err(_) => {
                return Err("the repository's cache is busy on this replica; try again".into());
            }
        }
    }
    let check = match grant.writing {
        Writing::Push => Check::Push,
        Writing::Update => Check::Update,
        Writing::Mirror => Check::Force,
    };
    let started = Instant::now();
    let repo_id = git_refs::precheck(&storage.db, grant.app, &updates, check)
        .await
        .map_err(|e| refusal(e, &fault))?;
    let prechecked = Instant::now();
    let new: Vec<&str> = updates.iter().filter_map(|u| u.new.as_deref()).collect();
    // A push's packs stay in its quarantine, which git moves into the repository once the push is accepted.
    let dir = quarantine
        .as_deref()
        .unwrap_or(&path.join("objects"))
        .join("pack");
    let mut packs = if new.is_empty() {
        Vec::new()
    } else {
        new_packs(&path, quarantine.as_deref(), &new)
            .await
            .map_err(fault)?
    };
    let packed = Instant::now();
    let mut streamed = 0;
    for pack in &mut packs {
        match crate::stream::finish(storage, repo_id, &dir, &pack.name).await {
            Some(stream) => {
                streamed += 1;
                pack.upload = Some(stream.upload);
                pack.chunk_bytes = Some(stream.chunk_bytes);
            }
            None => {
                let upload = storage.bucket.upload(repo_id, &dir, &pack.name);
                pack.upload = Some(upload.await.map_err(fault)?);
            }
        }
        crate::cache::keep(&dir, &pack.name).await.map_err(fault)?;
    }
    let uploaded = Instant::now();
    match git_refs::publish(
        &storage.db,
        grant.app,
        &updates,
        &packs,
        &grant.actor,
        check,
    )
    .await
    {
        Ok(version) => {
            // Where a publish's time goes: the push's own wait, after git has received and indexed its pack.
            let ms = |from: Instant, to: Instant| to.duration_since(from).as_millis() as u64;
            tracing::info!(
                app = %grant.app,
                version,
                refs = updates.len(),
                actor = %grant.actor,
                packs = packs.len(),
                bytes = packs.iter().map(|p| p.bytes).sum::<i64>(),
                streamed,
                precheck_ms = ms(started, prechecked),
                pack_ms = ms(prechecked, packed),
                upload_ms = ms(packed, uploaded),
                commit_ms = ms(uploaded, Instant::now()),
                "published a ref update"
            );
            Ok(())
        }
        Err(e) => Err(refusal(e, &fault)),
    }
}

/// What git is told of a refused update.
fn refusal(e: PublishError, fault: &impl Fn(anyhow::Error) -> String) -> String {
    match e {
        PublishError::Stale { name, .. } => {
            format!("{name} was updated by someone else since it was read; fetch and try again")
        }
        PublishError::Refused(reason) => reason,
        PublishError::Missing => "no such repository".into(),
        PublishError::Db(e) => fault(e.into()),
    }
}

/// `quarantine` when it is a directory inside the repository's object store, as git makes them.
fn inside_objects(path: &Path, quarantine: &str) -> Result<PathBuf, String> {
    let quarantine = Path::new(quarantine);
    let objects = path.join("objects");
    match (quarantine.canonicalize(), objects.canonicalize()) {
        (Ok(q), Ok(o)) if q.starts_with(&o) && q != o => Ok(q),
        _ => Err("the push's quarantine is not in the repository".into()),
    }
}

/// The packs that hold the objects `new` reaches and no ref of the cache reaches (every ref of the cache was
/// published, so its objects are in the bucket already), in the `pack` directory of `quarantine` (a push's objects)
/// or of the repository.
///
/// A push's received pack is taken as it is (a writer keeps every received pack: `transfer.unpackLimit=1`):
/// receive-pack indexes it with `--fix-thin`, so it stands on its own, and packing its objects again would be a
/// second pass over the whole push. It is kept (`.keep`), and `git pack-objects --honor-pack-keep` then packs only
/// the rest: objects the push leans on that the cache holds and no published ref reaches (a failed changeset's,
/// say).
async fn new_packs(
    path: &Path,
    quarantine: Option<&Path>,
    new: &[&str],
) -> anyhow::Result<Vec<PackRow>> {
    let objects = path.join("objects");
    let dir = quarantine.unwrap_or(&objects).join("pack");
    let mut git = crate::git(path);
    let mut options = vec!["--revs", "--quiet"];
    let mut packs = Vec::new();
    if let Some(quarantine) = quarantine {
        for name in crate::pack::complete_in(&dir).await? {
            crate::cache::keep(&dir, &name).await?;
            packs.push(crate::pack::row(&dir, &name).await?);
        }
        git.env("GIT_OBJECT_DIRECTORY", quarantine)
            .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", &objects);
        options.push("--honor-pack-keep");
    }
    let mut revs = String::new();
    for oid in new {
        revs.push_str(oid);
        revs.push('\n');
    }
    revs.push_str("--not\n");
    for oid in crate::cache::local_refs(path).await?.values() {
        revs.push_str(oid);
        revs.push('\n');
    }
    packs.extend(crate::pack::write(git, &options, revs.into_bytes(), &dir).await?);
    Ok(packs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_lines_become_updates_and_the_rest_is_dropped() {
        let a = "a".repeat(40);
        let b = "B".repeat(40);
        let text = format!(
            "{ZERO} {a} refs/heads/master\n{ZERO} {a} HEAD\n{ZERO} {ZERO} refs/heads/x\n{b} {ZERO} refs/tags/v1\n"
        );
        assert_eq!(
            parse_updates(&text, Writing::Push).unwrap(),
            vec![
                RefUpdate {
                    name: "refs/heads/master".into(),
                    old: None,
                    new: Some(a.clone()),
                },
                RefUpdate {
                    name: "refs/tags/v1".into(),
                    old: Some("b".repeat(40)),
                    new: None,
                },
            ]
        );
        assert!(parse_updates("nonsense", Writing::Push).is_err());
        assert!(parse_updates(&format!("xyz {a} refs/heads/m"), Writing::Update).is_err());
        for funny in [
            "refs/heads/a..b",
            "refs/heads/a b",
            "refs/heads/x.lock",
            "refs/heads/a/",
            "refs/heads/@{x}",
        ] {
            let err = parse_updates(&format!("{ZERO} {a} {funny}\n"), Writing::Push).unwrap_err();
            assert!(err.contains("funny ref"), "{funny}: {err}");
        }
        // A mirror's prune names no object on either side.
        assert_eq!(
            parse_updates(&format!("{ZERO} {ZERO} refs/heads/x\n"), Writing::Mirror).unwrap(),
            vec![RefUpdate {
                name: "refs/heads/x".into(),
                old: None,
                new: None,
            }]
        );
    }
}
