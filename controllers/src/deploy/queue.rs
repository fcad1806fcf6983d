//! The order of a channel's deploys: by creation time, then by name (the API names deploys with their creation
//! time in milliseconds, so deploys made within one second keep their order). Pure, so it is tested without a
//! cluster.

use kube::ResourceExt;
use slipway_crds::{Deploy, DeployPhase};

fn age_key(d: &Deploy) -> (Option<k8s_openapi::jiff::Timestamp>, String) {
    (
        d.metadata.creation_timestamp.as_ref().map(|t| t.0),
        d.name_any(),
    )
}

/// Whether `d` is queued or running.
pub fn in_flight(d: &Deploy) -> bool {
    d.status
        .as_ref()
        .map(|s| s.phase)
        .unwrap_or_default()
        .in_flight()
}

/// How many deploys of the channel in flight are older than `deploy` (0: it may start).
pub fn ahead_of(siblings: &[Deploy], deploy: &Deploy) -> usize {
    let key = age_key(deploy);
    siblings
        .iter()
        .filter(|d| d.uid() != deploy.uid() && in_flight(d) && age_key(d) < key)
        .count()
}

/// The deploys of `changed`'s channel its change may let start: its queued siblings, once it has finished or is
/// being deleted. A change of a deploy still in flight (a running build's progress) unblocks nobody, so it wakes
/// nobody; a queued deploy also looks again on its own after a while, for an older one deleted mid-flight (a
/// deletion the watch reports without a mark).
pub fn unblocked_by<'a>(
    changed: &Deploy,
    siblings: impl IntoIterator<Item = &'a Deploy>,
) -> Vec<&'a Deploy> {
    if in_flight(changed) && changed.metadata.deletion_timestamp.is_none() {
        return Vec::new();
    }
    siblings
        .into_iter()
        .filter(|d| {
            d.uid() != changed.uid()
                && d.metadata.namespace == changed.metadata.namespace
                && d.spec.channel == changed.spec.channel
                && d.status.as_ref().map(|s| s.phase).unwrap_or_default() == DeployPhase::Queued
        })
        .collect()
}

/// The newest deploy in flight, if any (the channel's `pendingDeploy`).
pub fn newest_in_flight(siblings: &[Deploy]) -> Option<&Deploy> {
    siblings
        .iter()
        .filter(|d| in_flight(d))
        .max_by_key(|d| age_key(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipway_crds::DeployStatus;

    fn deploy(name: &str, second: i64, phase: Option<DeployPhase>) -> Deploy {
        let mut d: Deploy = serde_json::from_value(serde_json::json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
            "metadata": {"name": name, "uid": name},
            "spec": {"channel": "blog.prod", "sha": "master"}
        }))
        .unwrap();
        d.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(second).unwrap(),
        ));
        d.status = phase.map(|phase| DeployStatus {
            phase,
            ..Default::default()
        });
        d
    }

    #[test]
    fn only_a_finished_or_deleted_deploy_wakes_and_only_the_queued_of_its_channel() {
        let running = deploy("a.2", 20, Some(DeployPhase::Running));
        let queued = deploy("a.3", 30, None);
        let also_queued = deploy("a.4", 40, Some(DeployPhase::Queued));
        let old_done = deploy("a.1", 10, Some(DeployPhase::Success));
        let mut elsewhere = deploy("b.1", 30, None);
        elsewhere.spec.channel = "blog.next".into();
        let all = [&old_done, &running, &queued, &also_queued, &elsewhere];
        let names = |woken: Vec<&Deploy>| woken.iter().map(|d| d.name_any()).collect::<Vec<_>>();

        assert!(
            unblocked_by(&running, all).is_empty(),
            "a running build's progress wakes nobody"
        );
        let mut finished = running.clone();
        finished.status = Some(DeployStatus {
            phase: DeployPhase::Failed,
            ..Default::default()
        });
        assert_eq!(names(unblocked_by(&finished, all)), ["a.3", "a.4"]);
        let mut deleting = running.clone();
        deleting.metadata.deletion_timestamp = old_done.metadata.creation_timestamp.clone();
        assert_eq!(names(unblocked_by(&deleting, all)), ["a.3", "a.4"]);
    }

    #[test]
    fn a_deploy_waits_behind_older_ones_in_flight() {
        let old_done = deploy("a.1", 10, Some(DeployPhase::Success));
        let running = deploy("a.2", 20, Some(DeployPhase::Running));
        let queued = deploy("a.3", 30, None);
        let newer = deploy("a.4", 30, Some(DeployPhase::Queued));
        let all = vec![old_done, running.clone(), queued.clone(), newer.clone()];
        assert_eq!(ahead_of(&all, &running), 0);
        assert_eq!(ahead_of(&all, &queued), 1);
        assert_eq!(
            ahead_of(&all, &newer),
            2,
            "same second: the name breaks the tie"
        );
        assert_eq!(
            newest_in_flight(&all).map(|d| d.name_any()),
            Some("a.4".into())
        );
    }

    #[test]
    fn finished_deploys_hold_nothing_up() {
        let all = vec![
            deploy("a.1", 10, Some(DeployPhase::Failed)),
            deploy("a.2", 20, Some(DeployPhase::Success)),
        ];
        assert!(newest_in_flight(&all).is_none());
        let next = deploy("a.3", 30, None);
        assert_eq!(ahead_of(&all, &next), 0);
    }
}
