//! Garbage collection of the apps' repositories, once a day: `git gc` packs what pushes left loose and drops
//! objects nothing references any more once they are older than the prune window (`--git-gc-prune`, git's own
//! two weeks by default). Git ages an object by when it was written to the repository (its file's or pack's
//! time), not by when a force-push left it unreferenced, so a replaced commit older than the window goes at the
//! next collection and a snapshot naming it answers `snapshot_code_gone`. The window keeps gc safe beside pushes in
//! flight, whose objects are younger than it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use slipway_core::access::{Role, VisibleApp};
use slipway_core::state::AppState;

/// How often the repositories are collected.
pub const EVERY: Duration = Duration::from_secs(24 * 3600);

/// Runs `git gc --prune=<prune>` in the bare repository `repo`.
pub async fn collect(repo: &Path, prune: &str) -> anyhow::Result<()> {
    let out = tokio::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["gc", "--quiet"])
        .arg(format!("--prune={prune}"))
        .env_remove("GIT_DIR")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("start git gc: {e}"))?;
    anyhow::ensure!(
        out.status.success(),
        "git gc in {} failed: {}",
        repo.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Collects every app's repository; how many were collected. One that fails is logged and the rest go on.
/// Repositories in object storage are maintained instead ([`slipway_git_store::maintain`]), each by one replica.
pub async fn pass(state: &AppState, prune: &str) -> usize {
    if state.repos().in_objects() {
        return maintain_all(state, &slipway_git_store::maintain::Policy::default()).await;
    }
    let mut collected = 0;
    for app in state.cache().apps() {
        let Some(app) = VisibleApp::from_resource(app, Role::Owner) else {
            continue;
        };
        let repo = state.repos().path(&app.owner, &app.name);
        if !repo.exists() {
            continue;
        }
        match collect(&repo, prune).await {
            Ok(()) => collected += 1,
            Err(e) => {
                tracing::warn!(error = %e, "repository garbage collection failed; retried tomorrow")
            }
        }
    }
    collected
}

/// Maintains every repository kept in object storage that no replica maintained within `policy.every`, removes the
/// bucket's objects of repositories that are gone and this replica's caches of them, and aborts the uploads stopped
/// replicas left; how many were maintained.
pub async fn maintain_all(state: &AppState, policy: &slipway_git_store::maintain::Policy) -> usize {
    let mut maintained = 0;
    for app in state.cache().apps() {
        let Some(app) = VisibleApp::from_resource(app, Role::Owner) else {
            continue;
        };
        match state.repos().maintain(app.id, policy).await {
            Ok(Some(done)) => {
                maintained += 1;
                tracing::debug!(app = %app.id, ?done, "maintained a repository");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(app = %app.id, error = format!("{e:#}"), "repository maintenance failed; retried at the next pass")
            }
        }
    }
    let repos = state.repos();
    log_sweep(
        repos.remove_gone_repositories(policy.grace).await,
        "removed the bucket's objects of repositories that are gone",
        "removing the objects of repositories that are gone failed",
    );
    log_sweep(
        repos.abort_unfinished_uploads(policy.upload_grace).await,
        "aborted uploads that stopped replicas left",
        "aborting the uploads stopped replicas left failed",
    );
    log_sweep(
        repos.sweep_caches().await,
        "removed caches of repositories that are gone",
        "sweeping the repository caches failed",
    );
    maintained
}

/// Logs a sweep's outcome: `done` with how many things went (when any did), or `failed` with why; the next pass
/// sweeps again either way.
fn log_sweep(outcome: anyhow::Result<usize>, done: &str, failed: &str) {
    match outcome {
        Ok(0) => {}
        Ok(count) => tracing::info!(count, "{done}"),
        Err(e) => tracing::warn!(error = format!("{e:#}"), "{failed}"),
    }
}

/// How long after the start the first pass runs: soon, so an API restarted more often than [`EVERY`] still
/// collects, but not while a rollout is starting it.
pub const FIRST_PASS_AFTER: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// Collects every repository [`FIRST_PASS_AFTER`] the start and then every [`EVERY`], for the life of the process.
pub async fn run(state: AppState, prune: String) {
    tokio::time::sleep(FIRST_PASS_AFTER).await;
    loop {
        let collected = pass(&state, &prune).await;
        tracing::info!(collected, "repositories garbage-collected");
        tokio::time::sleep(EVERY).await;
    }
}
