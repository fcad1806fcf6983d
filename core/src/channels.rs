//! Writing a Channel resource: what creating an app, adding a channel and moving an app to another account share.

use kube::api::PostParams;
use kube::{Api, ResourceExt};
use slipway_crds::names::{self, AppName, ChannelName, GitRefBinding};
use slipway_crds::{App, Channel, ChannelSpec};

use super::error::ApiError;
use super::state::AppState;
use crate::platform::tenancy::FIELD_MANAGER;

/// Writes the Channel resource of `channel`, owned by `app` so it goes when the app goes.
pub async fn create(
    state: &AppState,
    app: &App,
    channel: &ChannelName,
    binding: &GitRefBinding,
) -> Result<Channel, ApiError> {
    let app_name: AppName = app.name_any().parse()?;
    let mut resource = Channel::new(
        &names::channel_resource_name(&app_name, channel),
        ChannelSpec {
            app: app_name.to_string(),
            git_ref_binding: binding.to_string(),
            env_secret: None,
        },
    );
    resource.metadata.owner_references = Some(vec![super::owners::owned_by(app)?]);
    let namespace = app.namespace().unwrap_or_default();
    let channels: Api<Channel> = Api::namespaced(state.kube().clone(), &namespace);
    match channels
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &resource,
        )
        .await
    {
        Ok(c) => Ok(c),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // The operator writes an App's prod channel too, when it finds it missing: one it wrote for this
            // app, as this call would have, is this call's channel, not another's.
            match channels.get_opt(&resource.name_any()).await? {
                Some(existing) if same_channel(&existing, &resource) => Ok(existing),
                _ => Err(ApiError::BadRequest(format!(
                    "app {app_name} already has a channel named {channel}"
                ))),
            }
        }
        Err(e) => Err(admission_or(e)),
    }
}

/// Whether `existing` is the channel `wanted` describes: owned by the same App object, with the same binding.
fn same_channel(existing: &Channel, wanted: &Channel) -> bool {
    let owner = |c: &Channel| {
        c.metadata
            .owner_references
            .as_ref()
            .and_then(|refs| refs.iter().find(|r| r.kind == "App").map(|r| r.uid.clone()))
    };
    existing.metadata.deletion_timestamp.is_none()
        && owner(existing).is_some()
        && owner(existing) == owner(wanted)
        && existing.spec == wanted.spec
}

/// A refusal by the admission webhook is a 400 with its message (the same rules the API checks first, so this is
/// only reached in a race); anything else is internal.
pub fn admission_or(e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(s)
            if s.code == 400
                || s.code == 422
                || s.code == 403
                    && s.reason == "Forbidden"
                    && s.message.contains("admission webhook") =>
        {
            let message = s
                .message
                .rsplit_once("denied the request: ")
                .map(|(_, m)| m.to_owned())
                .unwrap_or(s.message.clone());
            ApiError::BadRequest(message)
        }
        other => other.into(),
    }
}
