//! A commit's files as a tar stream, made by `git archive` and sent as it is produced: the code download route
//! and the internal archive route (build sources, the edge's static cache) both answer with it.

use std::path::Path;
use std::process::Stdio;

use axum::body::Body;
use tokio_util::io::ReaderStream;

/// Starts `git archive --format=tar <sha>` in `repo` and returns its output as a body. A failure after the first
/// byte is logged (the status line has gone out by then).
pub fn tar_body(repo: &Path, sha: &str) -> anyhow::Result<Body> {
    let mut child = tokio::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["archive", "--format=tar", sha])
        .env_remove("GIT_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| anyhow::anyhow!("start git archive: {e}"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("git archive has no stdout"))?;
    tokio::spawn(async move {
        match child.wait_with_output().await {
            Ok(out) if !out.status.success() => tracing::warn!(
                status = %out.status,
                stderr = %String::from_utf8_lossy(&out.stderr),
                "git archive failed mid-stream"
            ),
            Err(e) => tracing::warn!(error = %e, "waiting for git archive failed"),
            Ok(_) => {}
        }
    });
    Ok(Body::from_stream(ReaderStream::with_capacity(
        stdout,
        64 * 1024,
    )))
}
