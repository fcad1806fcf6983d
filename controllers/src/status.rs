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
    patch(api, obj, current, wanted, serde_json::json!({})).await
}

/// [`patch_if_changed`], but only onto the very version of `obj` the status was computed from: the patch carries
/// `obj`'s `resourceVersion`, so the apiserver refuses it with 409 when the object changed meanwhile or was
/// deleted and replaced by another of the same name. For a status that is an identity (a Forward's address), where
/// one computed from a stale copy must never land on a newer object.
pub async fn patch_if_changed_at_version<K, S>(
    api: &Api<K>,
    obj: &K,
    current: Option<&S>,
    wanted: &S,
) -> kube::Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize + PartialEq,
{
    let metadata = serde_json::json!({ "resourceVersion": obj.resource_version() });
    patch(api, obj, current, wanted, metadata).await
}

async fn patch<K, S>(
    api: &Api<K>,
    obj: &K,
    current: Option<&S>,
    wanted: &S,
    metadata: serde_json::Value,
) -> kube::Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize + PartialEq,
{
    if current == Some(wanted) {
        return Ok(false);
    }
    let patch = serde_json::json!({ "metadata": metadata, "status": wanted });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch_status(&obj.name_any(), &params, &Patch::Merge(&patch))
        .await?;
    Ok(true)
}

/// Whether `error` is the apiserver's 409: a write guarded by a resourceVersion met a newer object.
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}
