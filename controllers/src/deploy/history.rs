//! Bounded deploy history: a channel keeps its recent finished Deploys, not every one it ever had. A Deploy
//! carries its build Job, its env Secret and (through the API's sweep of rows whose deploy is gone) its log and
//! env snapshot, so history left to grow would grow all of those without bound, one set per deploy of a channel
//! that deploys on every push.
//!
//! What a channel keeps:
//! - every deploy in flight;
//! - its newest [`KEEP_FINISHED`] finished deploys, while younger than [`MAX_AGE`];
//! - whatever its age, the newest successful deploy of each of its newest [`KEEP_IMAGES`] distinct images (for a
//!   static channel, commits): the live one, and what a rewind, and a rewind of that rewind, go back to.
//!
//! Everything else is deleted, and with a pruned Deploy goes its image when no kept Deploy runs the same one.
//! Pure selection, so it is tested without a cluster.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use slipway_crds::{Channel, Deploy, DeployPhase};

use crate::build::{self, registry::Registry};
use crate::context::Context;
use crate::error::Error;

/// Finished deploys a channel keeps, newest first.
pub const KEEP_FINISHED: usize = 20;
/// How long a finished deploy beyond the successful ones rewind needs is kept.
pub const MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Distinct images (commits, for static channels) whose newest successful deploy is kept whatever its age.
pub const KEEP_IMAGES: usize = 3;

fn phase(d: &Deploy) -> DeployPhase {
    d.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn created(d: &Deploy) -> Option<Timestamp> {
    d.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// What a successful deploy brought live: its image, or for a static channel its commit.
fn ran(d: &Deploy) -> Option<String> {
    let status = d.status.as_ref()?;
    status
        .image
        .as_ref()
        .map(|i| i.reference.clone())
        .or_else(|| status.resolved_sha.clone())
}

/// The deploys of one channel (`siblings`) its history no longer keeps at `now`, oldest last.
pub fn expired(siblings: &[Deploy], now: Timestamp) -> Vec<&Deploy> {
    let mut finished: Vec<&Deploy> = siblings
        .iter()
        .filter(|d| !phase(d).in_flight() && d.metadata.deletion_timestamp.is_none())
        .collect();
    // Newest first, by creation time and then name, the queue's own order.
    finished.sort_by_key(|d| std::cmp::Reverse((created(d), d.name_any())));

    let mut kept: HashSet<String> = HashSet::new();
    let mut images: Vec<String> = Vec::new();
    for d in finished.iter().filter(|d| phase(d) == DeployPhase::Success) {
        let Some(image) = ran(d) else { continue };
        if images.len() == KEEP_IMAGES {
            break;
        }
        if !images.contains(&image) {
            images.push(image);
            kept.insert(d.name_any());
        }
    }
    let max_age = i64::try_from(MAX_AGE.as_secs()).unwrap_or(i64::MAX);
    finished
        .into_iter()
        .enumerate()
        .filter(|(rank, d)| {
            let young = created(d).is_none_or(|t| now.as_second() - t.as_second() < max_age);
            !(kept.contains(&d.name_any()) || (*rank < KEEP_FINISHED && young))
        })
        .map(|(_, d)| d)
        .collect()
}

/// The image digests references of `pruned` that no deploy left in `siblings` runs: they can be deleted.
pub fn unreferenced_images<'a>(siblings: &'a [Deploy], pruned: &[&'a Deploy]) -> Vec<&'a str> {
    let gone: HashSet<String> = pruned.iter().map(|d| d.name_any()).collect();
    let still_run: HashSet<&str> = siblings
        .iter()
        .filter(|d| !gone.contains(&d.name_any()))
        .filter_map(|d| d.status.as_ref()?.image.as_ref())
        .map(|i| i.reference.as_str())
        .collect();
    let mut unreferenced: Vec<&str> = pruned
        .iter()
        .filter_map(|d| d.status.as_ref()?.image.as_ref())
        .map(|i| i.reference.as_str())
        .filter(|r| !still_run.contains(r))
        .collect();
    unreferenced.sort_unstable();
    unreferenced.dedup();
    unreferenced
}

/// Deletes what the history of `channel` no longer keeps: first the images only pruned deploys ran (a Deploy gone
/// before its image would leave the image for nobody to find), then the Deploys, whose build Jobs and env Secrets
/// go with them by owner reference. Already gone is fine, so a repeated call does nothing more.
pub async fn prune(ctx: &Context, channel: &Channel, siblings: &[Deploy]) -> Result<(), Error> {
    let expired = expired(siblings, Timestamp::now());
    if expired.is_empty() {
        return Ok(());
    }
    let repository = build::repository(channel)?;
    let registry = Registry::of(ctx);
    for reference in unreferenced_images(siblings, &expired) {
        if let Some((_, digest)) = reference.rsplit_once('@') {
            registry.delete(&repository, digest).await?;
        }
    }
    let namespace = channel.namespace().ok_or(Error::Incomplete("namespace"))?;
    let deploys: Api<Deploy> = Api::namespaced(ctx.client.clone(), &namespace);
    for deploy in &expired {
        crate::deletion::delete_if_present(&deploys, &deploy.name_any()).await?;
    }
    tracing::info!(channel = %channel.name_any(), %namespace, pruned = expired.len(), "deploy history pruned");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use slipway_crds::{DeployImage, DeployStatus};

    const DAY: i64 = 24 * 3600;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    /// Deploy `n` of a channel, made `age_days` ago, in `phase`, running `image` when it has one.
    fn deploy(n: usize, age_days: i64, phase: DeployPhase, image: Option<&str>) -> Deploy {
        let mut d: Deploy = serde_json::from_value(serde_json::json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
            "metadata": {"name": format!("web.prod-{n:04}")},
            "spec": {"channel": "web.prod", "sha": "master"}
        }))
        .unwrap();
        // Later deploys are newer: one second apart within the day.
        let at = now().as_second() - age_days * DAY - 10_000 + i64::try_from(n).unwrap();
        d.metadata.creation_timestamp = Some(Time(Timestamp::from_second(at).unwrap()));
        d.status = Some(DeployStatus {
            phase,
            resolved_sha: Some(format!("{n:040}")),
            image: image.map(|i| DeployImage {
                reference: format!("registry/ns/web@sha256:{i}"),
                tag: format!("{n:040}"),
                size_bytes: 1,
                charged_size_bytes: None,
                matched_base: None,
                created: Time(Timestamp::from_second(at).unwrap()),
            }),
            ..Default::default()
        });
        d
    }

    fn names(ds: &[&Deploy]) -> Vec<String> {
        ds.iter().map(|d| d.name_any()).collect()
    }

    #[test]
    fn a_channel_keeps_its_newest_finished_deploys_and_everything_in_flight() {
        let mut all: Vec<Deploy> = (0..30)
            .map(|n| deploy(n, 1, DeployPhase::Failed, None))
            .collect();
        all.push(deploy(30, 0, DeployPhase::Running, None));
        all.push(deploy(31, 0, DeployPhase::Queued, None));
        let gone = expired(&all, now());
        let expected: Vec<String> = (0..10).rev().map(|n| format!("web.prod-{n:04}")).collect();
        assert_eq!(names(&gone), expected, "the 10 oldest of 30 failed deploys");
        assert!(expired(&all[..20], now()).is_empty(), "20 are kept");
    }

    #[test]
    fn old_deploys_go_but_the_newest_success_of_each_of_three_images_stays() {
        let all = vec![
            deploy(0, 90, DeployPhase::Success, Some("a")),
            deploy(1, 80, DeployPhase::Success, Some("b")),
            deploy(2, 70, DeployPhase::Success, Some("b")),
            deploy(3, 60, DeployPhase::Success, Some("c")),
            deploy(4, 50, DeployPhase::Success, Some("d")),
            deploy(5, 40, DeployPhase::Failed, None),
            deploy(6, 1, DeployPhase::Failed, None),
        ];
        let gone = expired(&all, now());
        // d (live), c and b (at 2, its newest success) stay whatever their age; a is a fourth image.
        assert_eq!(
            names(&gone),
            ["web.prod-0005", "web.prod-0001", "web.prod-0000"]
        );
        assert_eq!(
            unreferenced_images(&all, &gone),
            ["registry/ns/web@sha256:a"],
            "b is still run by a kept deploy"
        );
    }

    #[test]
    fn a_static_channel_counts_commits_and_a_deleting_deploy_is_left_alone() {
        let mut all: Vec<Deploy> = (0..25)
            .map(|n| deploy(n, 40, DeployPhase::Success, None))
            .collect();
        all[24].metadata.deletion_timestamp = all[24].metadata.creation_timestamp.clone();
        let gone = expired(&all, now());
        // 24 live ones, all older than 30 days: the newest three commits stay.
        assert_eq!(gone.len(), 21);
        assert!(!names(&gone).contains(&"web.prod-0023".to_owned()));
        assert!(!names(&gone).contains(&"web.prod-0024".to_owned()));
    }
}
