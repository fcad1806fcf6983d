//! Status writes without churn: a status is patched only when it differs from what the object already has.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::FIELD_MANAGER;

/// Patches `status` onto `obj` unless it already has exactly that status.
pub async fn patch_if_changed<K, S>(
    api: &Api<K>,
    obj: &K,
    current: Option<&S>,
    wanted: &S,
) -> kube::Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize + PartialEq,
{
    if current == Some(wanted) {
        return Ok(false);
    }
    let patch = serde_json::json!({ "status": wanted });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch_status(&obj.name_any(), &params, &Patch::Merge(&patch))
        .await?;
    Ok(true)
}
