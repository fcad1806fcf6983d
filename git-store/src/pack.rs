//! Pack files as the bucket keeps them: writing one with `git pack-objects`, and finding the ones a directory holds.
//! Publishing and maintenance both write packs this way; publishing also takes a push's received packs as they are.

use std::path::Path;

use anyhow::{Context, ensure};
use slipway_store::db::git_refs::PackRow;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs `git pack-objects <options> <dir>/pack` as `git` with `input` on its stdin: the pack it wrote, or `None`
/// when the pack holds no object (its files are removed then).
pub(crate) async fn write(
    mut git: tokio::process::Command,
    options: &[&str],
    input: Vec<u8>,
    dir: &Path,
) -> anyhow::Result<Option<PackRow>> {
    tokio::fs::create_dir_all(dir).await?;
    let mut child = git
        .arg("pack-objects")
        .args(options)
        .arg(dir.join("pack"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("run git pack-objects")?;
    let mut stdin = child
        .stdin
        .take()
        .context("git pack-objects has no stdin")?;
    // Fed from a task of its own, so that a long list never waits on pack-objects' output.
    let feed = tokio::spawn(async move {
        stdin.write_all(&input).await?;
        stdin.shutdown().await
    });
    let out = child.wait_with_output().await?;
    feed.await??;
    ensure!(
        out.status.success(),
        "git pack-objects: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let sha = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    ensure!(
        sha.len() >= 40 && sha.bytes().all(|b| b.is_ascii_hexdigit()),
        "git pack-objects printed {sha:?}"
    );
    let name = format!("pack-{sha}");
    if objects_in(&dir.join(format!("{name}.pack"))).await? == 0 {
        for extension in ["idx", "pack", "rev"] {
            match tokio::fs::remove_file(dir.join(format!("{name}.{extension}"))).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("remove {name}.{extension}")),
            }
        }
        return Ok(None);
    }
    row(dir, &name).await.map(Some)
}

/// The row of the pack `<dir>/<name>.pack`, not uploaded yet.
pub(crate) async fn row(dir: &Path, name: &str) -> anyhow::Result<PackRow> {
    let file = dir.join(format!("{name}.pack"));
    let bytes = tokio::fs::metadata(&file)
        .await
        .with_context(|| format!("read {}", file.display()))?
        .len();
    Ok(PackRow {
        name: name.to_owned(),
        bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
        upload: None,
        chunk_bytes: None,
    })
}

/// The packs in `dir` that git can read (both `.pack` and `.idx` are there), by name, sorted.
pub(crate) async fn complete_in(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("read {}", dir.display())),
    };
    let mut names = Vec::new();
    while let Some(entry) = entries.next_entry().await? {
        let file = entry.file_name().to_string_lossy().into_owned();
        if let Some(name) = file.strip_suffix(".idx")
            && name.starts_with("pack-")
            && tokio::fs::try_exists(dir.join(format!("{name}.pack"))).await?
        {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// How many objects the pack file at `file` says it holds (the count in its 12-byte header).
async fn objects_in(file: &Path) -> anyhow::Result<u32> {
    let mut header = [0u8; 12];
    tokio::fs::File::open(file)
        .await
        .with_context(|| format!("open {}", file.display()))?
        .read_exact(&mut header)
        .await
        .with_context(|| format!("read the header of {}", file.display()))?;
    ensure!(&header[..4] == b"PACK", "{} is not a pack", file.display());
    Ok(u32::from_be_bytes([
        header[8], header[9], header[10], header[11],
    ]))
}
