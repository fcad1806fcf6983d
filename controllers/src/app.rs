//! The App reconciler: makes sure every App has its `<app>.prod` channel (the REST API creates it; an App written
//! with kubectl gets it here) and reports whether the app is in place.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use slipway_crds::conditions::{self, reasons};
use slipway_crds::names::{self, AppName, ChannelName, GitRefBinding};
use slipway_crds::{App, AppStatus, Channel, ChannelSpec};

use crate::channel::publish;
use crate::context::{Context, FIELD_MANAGER};
use crate::error::Error;
use crate::status;

/// How often a healthy app is looked at again without a change.
const RECHECK: Duration = Duration::from_secs(300);

/// The prod Channel an App must have, owned by the App.
pub fn prod_channel(app: &App) -> Result<Channel, Error> {
    let name: AppName = app
        .name_any()
        .parse()
        .map_err(|e: names::InvalidName| Error::InvalidSpec(e.0.into()))?;
    let mut channel = Channel::new(
        &names::channel_resource_name(&name, &ChannelName::prod()),
        ChannelSpec {
            app: name.to_string(),
            git_ref_binding: GitRefBinding::prod().to_string(),
            env_secret: None,
        },
    );
    let mut owner = app
        .controller_owner_ref(&())
        .ok_or(Error::Incomplete("uid"))?;
    owner.controller = Some(false);
    channel.metadata.owner_references = Some(vec![owner]);
    Ok(channel)
}

/// The status an App should have.
pub fn desired_status(app: &App, ready: Result<(), &str>, now: Time) -> AppStatus {
    let mut status = app.status.clone().unwrap_or_default();
    let generation = app.metadata.generation;
    status.observed_generation = generation;
    let condition = match ready {
        Ok(()) => conditions::condition(
            conditions::READY,
            true,
            reasons::RECONCILED,
            "",
            generation,
            now,
        ),
        Err(message) => conditions::condition(
            conditions::READY,
            false,
            reasons::INVALID_SPEC,
            message,
            generation,
            now,
        ),
    };
    conditions::set_condition(&mut status.conditions, condition);
    status
}

/// Reconciles one App.
pub async fn reconcile(app: Arc<App>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = app.namespace().ok_or(Error::Incomplete("namespace"))?;
    let apps: Api<App> = Api::namespaced(ctx.client.clone(), &namespace);
    let channels: Api<Channel> = Api::namespaced(ctx.client.clone(), &namespace);
    let outcome = match prod_channel(&app) {
        Ok(prod) => {
            if channels.get_opt(&prod.name_any()).await?.is_none() {
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                };
                match channels.create(&params, &prod).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(())
        }
        Err(Error::InvalidSpec(message)) => Err(message),
        Err(e) => return Err(e),
    };
    let wanted = desired_status(
        &app,
        outcome.as_ref().map(|_| ()).map_err(String::as_str),
        Time(Timestamp::now()),
    );
    status::patch_if_changed(&apps, &app, app.status.as_ref(), &wanted).await?;
    if let Err(message) = outcome {
        publish(
            &ctx,
            app.as_ref(),
            EventType::Warning,
            reasons::INVALID_SPEC,
            message,
        )
        .await;
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(RECHECK))
}
