//! Writing a Deploy resource: what a deploy, a rewind and an app's move to another account share.

use std::time::{SystemTime, UNIX_EPOCH};

use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};
use slipway_crds::{Channel, Deploy, DeploySpec, labels};
use uuid::Uuid;

use super::access::VisibleApp;
use super::error::ApiError;
use super::state::AppState;
use crate::platform::tenancy::FIELD_MANAGER;

/// Name of a new Deploy resource: the Channel's name and the creation time in milliseconds (so deploys of one
/// channel sort by age even within a second), plus a random suffix.
fn deploy_resource_name(channel: &str) -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let suffix = &Uuid::new_v4().simple().to_string()[..6];
    format!("{channel}.{millis}-{suffix}")
}

/// Writes a Deploy of `spec` owned by `channel` and waits until the API's cache holds it (so the channel's
/// `pending_deploy` shows it at once); answers its id.
pub async fn create(
    state: &AppState,
    app: &VisibleApp,
    channel: &Channel,
    spec: DeploySpec,
) -> Result<String, ApiError> {
    let channel_resource = channel.name_any();
    let mut resource = Deploy::new(&deploy_resource_name(&channel_resource), spec);
    resource.metadata.labels = Some(
        [
            (labels::APP.to_owned(), app.name.to_string()),
            (
                labels::CHANNEL.to_owned(),
                channel.channel_name().to_owned(),
            ),
            (labels::MANAGED_BY.to_owned(), labels::MANAGER.to_owned()),
        ]
        .into(),
    );
    resource.metadata.owner_references = Some(vec![channel.controller_owner_ref(&()).ok_or_else(
        || ApiError::Internal(anyhow::anyhow!("channel {channel_resource} has no uid")),
    )?]);
    let deploys: Api<Deploy> = Api::namespaced(state.kube().clone(), &app.namespace);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let created = deploys
        .create(&params, &resource)
        .await
        .map_err(super::channels::admission_or)?;
    let deploy_id = created
        .uid()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("the new Deploy has no uid")))?;
    state.cache().deploy_appeared(&deploy_id).await?;
    Ok(deploy_id)
}
