//! `slipway admin git-import`: every App's repository from a volume into object storage, one at a time, with a
//! line of progress for each.

use std::path::Path;

use kube::api::ListParams;
use kube::{Api, ResourceExt};
use slipway_crds::App;
use slipway_crds::names::{AppName, Username};
use slipway_git_store::{RepoOf, Repos};

/// Imports the repository of every App under `from`; fails when any import failed, after trying all.
pub async fn import_all(kube: &kube::Client, repos: &Repos, from: &Path) -> anyhow::Result<()> {
    let apps = Api::<App>::all(kube.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let (total, mut imported, mut failed) = (apps.len(), 0, 0);
    for (i, app) in apps.iter().enumerate() {
        let (Some(id), Ok(name), Ok(owner)) = (
            app.uid().and_then(|u| u.parse().ok()),
            app.name_any().parse::<AppName>(),
            app.spec.owner.parse::<Username>(),
        ) else {
            continue;
        };
        let source = from.join(owner.as_str()).join(format!("{name}.git"));
        let at = format!("[{}/{total}] {owner}/{name}", i + 1);
        if !tokio::fs::try_exists(source.join("HEAD")).await? {
            eprintln!("{at}: no repository at {}, left", source.display());
            continue;
        }
        let app = RepoOf {
            id,
            owner: &owner,
            name: &name,
        };
        match slipway_git_store::import::import(repos, app, &source).await {
            Ok(done) => {
                imported += 1;
                eprintln!("{at}: {} refs checked, version {}", done.refs, done.version);
            }
            Err(e) => {
                failed += 1;
                eprintln!("{at}: failed: {e:#}");
            }
        }
        repos.forget_cache(id).await?;
    }
    eprintln!("imported {imported} repositories, {failed} failed, of {total} apps");
    anyhow::ensure!(failed == 0, "{failed} repositories were not imported");
    Ok(())
}
