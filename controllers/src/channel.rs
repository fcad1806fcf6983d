//! The Channel reconciler: resolves the channel's App, adopts the channel under it (so deleting the App deletes
//! its channels, also for channels written with kubectl), keeps its bucket ([`crate::blob`]) and, for non-static
//! channels, its SQL database ([`crate::postgres`]), and reports the hostname, phase and conditions.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use slipway_crds::conditions::{self, reasons};
use slipway_crds::names::{self, Username};
use slipway_crds::{App, Channel, ChannelStatus};

use crate::context::{Context, FIELD_MANAGER};
use crate::error::Error;

/// How often a healthy channel is looked at again without a change.
const RECHECK: Duration = Duration::from_secs(300);
/// The field manager of the status fields this reconciler writes, and no other writer touches: observedGeneration,
/// phase, hostname and conditions. The deploy reconciler writes the rest as [`crate::deploy::CHANNEL_MANAGER`],
/// so a channel's `managedFields` say which reconciler wrote which field.
pub const STATUS_MANAGER: &str = "slipway-operator-channel";

/// What the reconciler decided the channel's status should say.
#[derive(Debug, PartialEq)]
pub struct Observed {
    /// The hostname, when the App and names resolve.
    pub hostname: Option<String>,
    /// `Accepted` condition: (status, reason, message).
    pub accepted: (bool, &'static str, String),
    /// `ObjectStoreReady` condition, when the operator runs with object storage.
    pub object_store: Option<crate::blob::StoreState>,
    /// `DatabaseReady` condition, for a non-static channel when the operator runs with a data server.
    pub database: Option<crate::postgres::DatabaseState>,
}

/// Works out the status facts of `channel` given its App (if found). Pure, so it is tested from fixtures.
pub fn observe(channel: &Channel, app: Option<&App>, app_domain: &str) -> Observed {
    let Some(app) = app else {
        let message = format!("app {} does not exist in this namespace", channel.spec.app);
        return Observed {
            hostname: None,
            accepted: (false, reasons::REFERENCE_NOT_FOUND, message),
            object_store: None,
            database: None,
        };
    };
    let name = channel.name_any();
    let hostname =
        names::parse_channel_resource_name(&name).and_then(|(app_name, channel_name)| {
            let owner: Username = app.spec.owner.parse()?;
            names::channel_hostname(&app_name, &channel_name, &owner, app_domain)
        });
    match hostname {
        Ok(hostname) => Observed {
            hostname: Some(hostname),
            accepted: (true, reasons::RECONCILED, String::new()),
            object_store: None,
            database: None,
        },
        Err(e) => Observed {
            hostname: None,
            accepted: (false, reasons::INVALID_SPEC, e.0.to_owned()),
            object_store: None,
            database: None,
        },
    }
}

/// The status the channel should have, keeping what the deploy reconciler owns (currentSha, readyBy,
/// pendingDeploy). The phase follows from the status's facts ([`ChannelStatus::derived_phase`]): a channel whose
/// database cannot be made has failed provisioning, and comes back when a retry works.
pub fn desired_status(channel: &Channel, observed: &Observed, now: Time) -> ChannelStatus {
    let mut status = channel.status.clone().unwrap_or_default();
    let generation = channel.metadata.generation;
    status.observed_generation = generation;
    status.hostname = observed.hostname.clone();
    let (ok, reason, message) = &observed.accepted;
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            conditions::ACCEPTED,
            *ok,
            reason,
            message.clone(),
            generation,
            now.clone(),
        ),
    );
    let ready = status.current_sha.is_some() && *ok;
    let database_failed = observed.database.as_ref().filter(|d| !d.ready);
    let (ready_reason, ready_message) = if ready {
        (
            reasons::RECONCILED,
            "serving the deployed commit".to_owned(),
        )
    } else if let (true, Some(database)) = (*ok, database_failed) {
        (database.reason, database.message.clone())
    } else if *ok {
        (
            reasons::PROVISIONING,
            "waiting for the first successful deploy".to_owned(),
        )
    } else {
        (*reason, message.clone())
    };
    if let Some(store) = &observed.object_store {
        conditions::set_condition(
            &mut status.conditions,
            conditions::condition(
                conditions::OBJECT_STORE_READY,
                store.ready,
                store.reason,
                store.message.clone(),
                generation,
                now.clone(),
            ),
        );
    }
    if let Some(database) = &observed.database {
        conditions::set_condition(
            &mut status.conditions,
            conditions::condition(
                conditions::DATABASE_READY,
                database.ready,
                database.reason,
                database.message.clone(),
                generation,
                now.clone(),
            ),
        );
    }
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            conditions::READY,
            ready,
            ready_reason,
            ready_message,
            generation,
            now,
        ),
    );
    status.phase = status.derived_phase();
    status
}

/// Held by channels of app and docker apps until their images are gone from the registry.
pub const IMAGES_FINALIZER: &str = "slipway.dev/images";
/// How soon a channel whose bucket could not be made is tried again.
const OBJECT_STORE_RETRY: Duration = Duration::from_secs(15);
/// How soon a channel whose database could not be provisioned is tried again (any change of the channel, such as
/// a new annotation, tries at once).
const DATABASE_SWEEP: Duration = Duration::from_secs(3600);

/// Reconciles one Channel.
pub async fn reconcile(mut channel: Arc<Channel>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = channel.namespace().ok_or(Error::Incomplete("namespace"))?;
    if channel.metadata.deletion_timestamp.is_some() {
        // Workloads, routes and deploys go with the channel through owner references; its database, images and
        // bucket are not cluster objects, so they are removed here before the channel may go, the database first
        // (it ends the channel's sessions, and needs no other part of the platform than the data server).
        if has_finalizer(&channel, crate::postgres::FINALIZER) {
            let settings = ctx.postgres.as_ref().ok_or_else(|| {
                Error::Database(
                    "the channel holds a database but this operator runs without a data server"
                        .into(),
                )
            })?;
            crate::postgres::remove(&ctx, settings, &channel).await?;
            remove_finalizer(&ctx, &channel, crate::postgres::FINALIZER).await?;
            return Ok(Action::await_change());
        }
        if has_finalizer(&channel, IMAGES_FINALIZER) {
            crate::build::remove_images(&ctx, &channel).await?;
            remove_finalizer(&ctx, &channel, IMAGES_FINALIZER).await?;
            return Ok(Action::await_change());
        }
        if has_finalizer(&channel, crate::blob::FINALIZER) {
            let settings = ctx.blob.as_ref().ok_or_else(|| {
                Error::ObjectStore(
                    "the channel holds a bucket but this operator runs without object storage"
                        .into(),
                )
            })?;
            crate::blob::remove(&ctx, settings, &channel).await?;
            remove_finalizer(&ctx, &channel, crate::blob::FINALIZER).await?;
            return Ok(Action::await_change());
        }
        return Ok(Action::await_change());
    }
    crate::deploy::settle_pending(&ctx, &channel).await?;
    let app = crate::caches::app(&ctx, &channel).await?;
    let mut observed = observe(&channel, app.as_ref(), &ctx.config.app_domain);
    if let Some(app) = &app {
        if let Some(adopted) = adopt(&ctx, &channel, app).await? {
            channel = Arc::new(adopted);
        }
        // Every finalizer the channel needs goes on in one write, before what it guards exists, so no image,
        // bucket or database can outlive its channel. The reconcile goes on from the written version.
        let missing: Vec<&str> = finalizers_wanted(&ctx, app, observed.hostname.is_some())
            .into_iter()
            .filter(|f| !has_finalizer(&channel, f))
            .collect();
        if !missing.is_empty() {
            channel = Arc::new(add_finalizers(&ctx, &channel, &missing).await?);
        }
        if let Some(hostname) = &observed.hostname {
            crate::ingress::apply(&ctx, &channel, app, hostname).await?;
            if let Some(settings) = &ctx.blob {
                observed.object_store =
                    Some(crate::blob::ensure(&ctx, settings, &channel, app).await);
            }
            if let Some(settings) = ctx
                .postgres
                .as_ref()
                .filter(|_| crate::postgres::wanted(app))
            {
                observed.database =
                    Some(crate::postgres::ensure(&ctx, settings, &channel, app).await);
            }
        }
    }
    let wanted = desired_status(&channel, &observed, Time(Timestamp::now()));
    if channel.status.as_ref() != Some(&wanted) {
        // Only the fields this reconciler owns: the deploy reconciler writes currentSha, readyBy and
        // pendingDeploy, and a whole-status write from this (possibly older) copy would undo its moves.
        // The write names the version it was worked out from: the Ready condition and the phase follow
        // currentSha, and a deploy that went live in the meantime must not be answered with "provisioning".
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": channel.metadata.resource_version},
            "status": {
                "observedGeneration": wanted.observed_generation,
                "phase": wanted.phase,
                "hostname": wanted.hostname,
                "conditions": wanted.conditions,
            },
        });
        let channels: Api<Channel> = Api::namespaced(ctx.client.clone(), &namespace);
        let params = PatchParams {
            field_manager: Some(STATUS_MANAGER.into()),
            ..Default::default()
        };
        match channels
            .patch_status(&channel.name_any(), &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            // A newer version exists; its watch event reconciles again from it.
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    if !observed.accepted.0 {
        let note = format!("{}: {}", observed.accepted.1, observed.accepted.2);
        publish(
            &ctx,
            channel.as_ref(),
            EventType::Warning,
            observed.accepted.1,
            note,
        )
        .await;
        // Waits for a change of the Channel or its App (both are watched).
        return Ok(Action::await_change());
    }
    if let Some(store) = observed.object_store.as_ref().filter(|s| !s.ready) {
        publish(
            &ctx,
            channel.as_ref(),
            EventType::Warning,
            store.reason,
            store.message.clone(),
        )
        .await;
        return Ok(Action::requeue(OBJECT_STORE_RETRY));
    }
    if let Some(database) = observed.database.as_ref().filter(|d| !d.ready) {
        publish(
            &ctx,
            channel.as_ref(),
            EventType::Warning,
            database.reason,
            database.message.clone(),
        )
        .await;
        return Ok(Action::requeue(DATABASE_SWEEP));
    }
    Ok(Action::requeue(RECHECK))
}

fn has_finalizer(channel: &Channel, name: &str) -> bool {
    channel.finalizers().iter().any(|f| f == name)
}

/// The finalizers `channel` of `app` needs: its images' for an app that builds them; its bucket's and
/// database's for a channel with a hostname on a platform that keeps them.
fn finalizers_wanted(ctx: &Context, app: &App, has_hostname: bool) -> Vec<&'static str> {
    let builds_images = app.spec.template != slipway_crds::Template::Static;
    let keeps_bucket = has_hostname && ctx.blob.is_some();
    let keeps_database = has_hostname && ctx.postgres.is_some() && crate::postgres::wanted(app);
    [
        (builds_images, IMAGES_FINALIZER),
        (keeps_bucket, crate::blob::FINALIZER),
        (keeps_database, crate::postgres::FINALIZER),
    ]
    .into_iter()
    .filter_map(|(wanted, name)| wanted.then_some(name))
    .collect()
}

/// Adds the finalizers `names` to the channel's, answering the channel as written.
async fn add_finalizers(
    ctx: &Context,
    channel: &Channel,
    names: &[&str],
) -> Result<Channel, Error> {
    let mut finalizers = channel.finalizers().to_vec();
    finalizers.extend(names.iter().map(|n| (*n).to_owned()));
    write_finalizers(ctx, channel, finalizers).await
}

/// Removes the finalizer `name`, keeping the channel's others.
async fn remove_finalizer(ctx: &Context, channel: &Channel, name: &str) -> Result<(), Error> {
    let finalizers = channel
        .finalizers()
        .iter()
        .filter(|f| *f != name)
        .cloned()
        .collect();
    write_finalizers(ctx, channel, finalizers).await?;
    Ok(())
}

async fn write_finalizers(
    ctx: &Context,
    channel: &Channel,
    finalizers: Vec<String>,
) -> Result<Channel, Error> {
    // The resourceVersion makes the write fail (and the reconcile retry) if another writer changed the list.
    patch_metadata(
        ctx,
        channel,
        serde_json::json!({
            "finalizers": finalizers,
            "resourceVersion": channel.resource_version(),
        }),
    )
    .await
}

/// Merge-patches the channel's metadata with `metadata`.
async fn patch_metadata(
    ctx: &Context,
    channel: &Channel,
    metadata: serde_json::Value,
) -> Result<Channel, Error> {
    let channels: Api<Channel> =
        Api::namespaced(ctx.client.clone(), &channel.namespace().unwrap_or_default());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let patch = serde_json::json!({ "metadata": metadata });
    Ok(channels
        .patch(&channel.name_any(), &params, &Patch::Merge(&patch))
        .await?)
}

/// Makes the App an owner of the channel, so garbage collection removes the channel with its app; answers the
/// channel as written, if it was not owned yet.
async fn adopt(ctx: &Context, channel: &Channel, app: &App) -> Result<Option<Channel>, Error> {
    let app_uid = app.meta().uid.as_deref().ok_or(Error::Incomplete("uid"))?;
    if channel.owner_references().iter().any(|r| r.uid == app_uid) {
        return Ok(None);
    }
    let mut reference = app
        .controller_owner_ref(&())
        .ok_or(Error::Incomplete("uid"))?;
    reference.controller = Some(false);
    let mut references = channel.owner_references().to_vec();
    references.push(reference);
    patch_metadata(
        ctx,
        channel,
        serde_json::json!({ "ownerReferences": references }),
    )
    .await
    .map(Some)
}

/// Publishes an Event on the channel; failing to publish is logged, never fatal.
pub(crate) async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    kind: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_: kind,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::warn!(error = %e, "could not publish an event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        serde_yaml::from_str(yaml).unwrap()
    }

    const CHANNEL: &str = "
apiVersion: slipway.dev/v1alpha1
kind: Channel
metadata: {name: blog.next, namespace: slipway-user-alice, generation: 2}
spec: {app: blog, gitRefBinding: 'branch:next'}
";
    const APP: &str = "
apiVersion: slipway.dev/v1alpha1
kind: App
metadata: {name: blog, namespace: slipway-user-alice, uid: 8d1c3c1e-0000-4000-8000-000000000001}
spec: {owner: alice}
";

    fn now() -> Time {
        Time(Timestamp::from_second(1_800_000_000).unwrap())
    }

    #[test]
    fn a_new_channel_is_provisioning_with_its_hostname() {
        let channel: Channel = fixture(CHANNEL);
        let app: App = fixture(APP);
        let observed = observe(&channel, Some(&app), "apps.test");
        assert_eq!(
            observed.hostname.as_deref(),
            Some("next-blog-alice.apps.test")
        );
        let status = desired_status(&channel, &observed, now());
        assert_eq!(status.phase, slipway_crds::ChannelPhase::Provisioning);
        assert_eq!(status.observed_generation, Some(2));
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", reasons::PROVISIONING)
        );
        let accepted = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Accepted")
            .unwrap();
        assert_eq!(accepted.status, "True");
    }

    #[test]
    fn a_channel_without_its_app_is_not_accepted() {
        let channel: Channel = fixture(CHANNEL);
        let observed = observe(&channel, None, "apps.test");
        assert_eq!(observed.accepted.1, reasons::REFERENCE_NOT_FOUND);
        let status = desired_status(&channel, &observed, now());
        assert!(status.hostname.is_none());
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.reason, reasons::REFERENCE_NOT_FOUND);
    }

    #[test]
    fn reconciling_twice_changes_nothing() {
        let mut channel: Channel = fixture(CHANNEL);
        let app: App = fixture(APP);
        let observed = observe(&channel, Some(&app), "apps.test");
        let first = desired_status(&channel, &observed, now());
        channel.status = Some(first.clone());
        let later = Time(Timestamp::from_second(1_800_000_600).unwrap());
        assert_eq!(
            desired_status(&channel, &observed, later),
            first,
            "no churn: transition times stay"
        );
    }
}
