//! Which Channel a Domain belongs to, so that it goes when its channel goes. The REST API writes every Domain with
//! its Channel as owner; a Domain written with kubectl, or by an older version (which wrote none), is adopted: by the
//! reconciler as soon as it finds the channel, and by the sweep.
//!
//! The sweep runs on the leader at start and then every [`SWEEP_EVERY`]. It reads every Domain and then every
//! Channel from the apiserver and decides each Domain on its own ([`verdict`]):
//!
//! - its Channel exists and it names no Channel as owner: adopted;
//! - its Channel does not exist and it names none as owner: an orphan, such as the Domains older versions left
//!   behind when they deleted an app or a channel, which held their names (`domain_taken`) for good. It is deleted
//!   (its finalizer still removes its certificate) once it has been without its channel for a grace period
//!   ([`ORPHAN_GRACE`]), counted from the later of its creation and the moment the reconciler found its channel
//!   missing (the `Accepted` condition's turn to `ReferenceNotFound`): GitOps may apply a Domain before its
//!   Channel, or replace a Channel, and gets that long to bring the channel;
//! - it names a Channel as owner: garbage collection's, whether that channel is there or gone;
//! - it is being deleted already: left alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};
use slipway_crds::conditions::{self, reasons};
use slipway_crds::{Channel, Domain};

use crate::context::Context;
use crate::error::Error;

/// How long a Domain may be without its Channel before the sweep deletes it.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(3600);
/// How often the sweep runs.
pub const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// What the sweep does with one Domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing.
    Keep,
    /// Names its Channel (the uid given) as owner.
    Adopt,
    /// Deletes it.
    Remove,
}

/// The verdict on `domain`, whose Channel has `channel_uid` (`None`: it does not exist), at `now`.
pub fn verdict(
    domain: &Domain,
    channel_uid: Option<&str>,
    now: Timestamp,
    grace: Duration,
) -> Verdict {
    if domain.metadata.deletion_timestamp.is_some() || owned(domain) {
        return Verdict::Keep;
    }
    if channel_uid.is_some() {
        return Verdict::Adopt;
    }
    let orphaned_since = missing_channel_since(domain);
    let grace = k8s_openapi::jiff::SignedDuration::try_from(grace)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
    match orphaned_since {
        Some(since) if now.duration_since(since) >= grace => Verdict::Remove,
        _ => Verdict::Keep,
    }
}

/// Whether `domain` names a Channel as its owner.
fn owned(domain: &Domain) -> bool {
    let kind = Channel::kind(&());
    let api_version = Channel::api_version(&());
    domain
        .owner_references()
        .iter()
        .any(|o| o.kind == kind && o.api_version == api_version)
}

/// Since when `domain` may have been without its channel: its creation, or the reconciler's finding that the channel
/// is missing when that came later. `None` for a Domain without a creation time (never stored).
fn missing_channel_since(domain: &Domain) -> Option<Timestamp> {
    let created = domain.metadata.creation_timestamp.as_ref()?.0;
    let found_missing = domain
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == conditions::ACCEPTED)
        })
        .filter(|c| c.status == "False" && c.reason == reasons::REFERENCE_NOT_FOUND)
        .map(|c| c.last_transition_time.0);
    Some(found_missing.map_or(created, |t| t.max(created)))
}

/// Makes the Channel `channel` the owner of `domain` unless it names a Channel already; answers the Domain as it
/// now stands.
pub async fn adopt(
    api: &Api<Domain>,
    domain: Arc<Domain>,
    channel: &Channel,
) -> Result<Arc<Domain>, Error> {
    let uid = channel.uid().ok_or(Error::Incomplete("channel uid"))?;
    if owned(&domain) || domain.metadata.deletion_timestamp.is_some() {
        return Ok(domain);
    }
    let owner = crate::adopt::reference::<Channel>(&channel.name_any(), &uid);
    Ok(Arc::new(
        crate::adopt::add_owner(api, domain.as_ref(), owner).await?,
    ))
}

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Domains given their Channel as owner.
    pub adopted: usize,
    /// Orphaned Domains deleted.
    pub removed: usize,
}

/// One sweep of the Domains the operator follows, with `grace` for orphans ([`ORPHAN_GRACE`] but in tests).
pub async fn sweep(ctx: &Context, grace: Duration) -> Result<Swept, Error> {
    // Domains first: a Channel made between the two reads is then seen rather than missed.
    let domains = crate::run::scoped::<Domain>(ctx)
        .list(&ListParams::default())
        .await?;
    let channels: HashMap<(String, String), String> = crate::run::scoped::<Channel>(ctx)
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c: PartialObjectMeta<Channel>| {
            Some(((c.namespace()?, c.name_any()), c.uid()?))
        })
        .collect();
    let now = Timestamp::now();
    let mut swept = Swept::default();
    for domain in domains.items {
        let Some(namespace) = domain.namespace() else {
            continue;
        };
        let channel_uid = channels
            .get(&(namespace.clone(), domain.spec.channel.clone()))
            .map(String::as_str);
        let api: Api<Domain> = Api::namespaced(ctx.client.clone(), &namespace);
        match verdict(&domain, channel_uid, now, grace) {
            Verdict::Keep => {}
            Verdict::Adopt => {
                let owner = crate::adopt::reference::<Channel>(
                    &domain.spec.channel,
                    channel_uid.unwrap_or_default(),
                );
                let adopted = crate::adopt::add_owner(&api, &domain, owner).await;
                if went_through(adopted.map(|_| ()))? {
                    swept.adopted += 1;
                }
            }
            Verdict::Remove => {
                tracing::info!(
                    namespace,
                    domain = domain.spec.domain,
                    channel = domain.spec.channel,
                    "deleting a Domain whose channel is gone"
                );
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: domain.uid(),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                let removed = api.delete(&domain.name_any(), &params).await;
                if went_through(removed.map(|_| ()))? {
                    swept.removed += 1;
                }
            }
        }
    }
    Ok(swept)
}

/// Whether a write of the sweep went through. One that found the Domain gone, or changed since it was read (the
/// reconciler adopted it meanwhile), is not an error: the next sweep decides on it again.
fn went_through(written: Result<(), kube::Error>) -> Result<bool, Error> {
    match written {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Sweeps at once and then every [`SWEEP_EVERY`], for good (the leader runs it beside the controllers).
pub async fn every(ctx: Arc<Context>) {
    let mut every = tokio::time::interval(SWEEP_EVERY);
    loop {
        every.tick().await;
        match sweep(&ctx, ctx.orphan_domain_grace).await {
            Ok(swept) if swept == Swept::default() => {}
            Ok(swept) => tracing::info!(
                adopted = swept.adopted,
                removed = swept.removed,
                "swept the Domains"
            ),
            Err(e) => tracing::warn!(error = %e, "sweeping the Domains failed; trying again later"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn domain(created_ago: i64, yaml_rest: &str) -> Domain {
        let created = Timestamp::from_second(NOW - created_ago).unwrap();
        serde_yaml::from_str(&format!(
            "apiVersion: slipway.dev/v1alpha1\nkind: Domain\nmetadata: {{name: www.example.com, namespace: ns, \
             creationTimestamp: '{created}'{yaml_rest}}}\nspec: {{channel: blog.prod, domain: www.example.com}}\n"
        ))
        .unwrap()
    }

    fn judge(domain: &Domain, channel_uid: Option<&str>) -> Verdict {
        verdict(
            domain,
            channel_uid,
            Timestamp::from_second(NOW).unwrap(),
            ORPHAN_GRACE,
        )
    }

    const OWNED: &str = ", ownerReferences: [{apiVersion: slipway.dev/v1alpha1, kind: Channel, name: blog.prod, uid: c1}]";

    #[test]
    fn a_domain_without_an_owner_is_adopted_when_its_channel_exists() {
        assert_eq!(judge(&domain(10, ""), Some("c1")), Verdict::Adopt);
        assert_eq!(judge(&domain(10, OWNED), Some("c1")), Verdict::Keep);
        // Owned by a Channel of that name that is gone: garbage collection removes it, nothing is added.
        assert_eq!(judge(&domain(10, OWNED), Some("c2")), Verdict::Keep);
    }

    #[test]
    fn an_orphan_goes_after_the_grace_and_an_owned_one_is_left_to_garbage_collection() {
        assert_eq!(
            judge(&domain(3599, ""), None),
            Verdict::Keep,
            "GitOps' grace"
        );
        assert_eq!(judge(&domain(3600, ""), None), Verdict::Remove);
        assert_eq!(judge(&domain(86_400, OWNED), None), Verdict::Keep);
        let going = domain(86_400, ", deletionTimestamp: '2026-01-01T00:00:00Z'");
        assert_eq!(judge(&going, None), Verdict::Keep);
    }

    #[test]
    fn the_grace_runs_from_when_the_channel_was_found_missing() {
        let found = |ago: i64| {
            let at = Timestamp::from_second(NOW - ago).unwrap();
            let mut d = domain(86_400, "");
            d.status = Some(
                serde_yaml::from_str(&format!(
                    "conditions: [{{type: Accepted, status: 'False', reason: ReferenceNotFound, message: '', \
                     lastTransitionTime: '{at}'}}]"
                ))
                .unwrap(),
            );
            d
        };
        assert_eq!(
            judge(&found(60), None),
            Verdict::Keep,
            "replaced a minute ago"
        );
        assert_eq!(judge(&found(3600), None), Verdict::Remove);
    }
}
