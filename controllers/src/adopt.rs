//! Adoption: the owner reference a reconciler adds to an object written without one (with kubectl, or by an older
//! version), so garbage collection removes the object with its owner as it does the ones the API writes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::context::FIELD_MANAGER;

/// The reference that makes the `K` named `name` with `uid` an owner: not the controller, and without
/// blockOwnerDeletion (which would need update on the owner's finalizers, a right the operator does not hold).
pub fn reference<K: Resource<DynamicType = ()>>(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(false),
        block_owner_deletion: None,
    }
}

/// Adds `owner` to the owners of `obj`, guarded by its resourceVersion (a change in between fails the write, and the
/// caller's next pass sees it); answers the object as written.
pub async fn add_owner<K>(api: &Api<K>, obj: &K, owner: OwnerReference) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut owners = obj.owner_references().to_vec();
    owners.push(owner);
    let patch = serde_json::json!({"metadata": {
        "ownerReferences": owners, "resourceVersion": obj.resource_version(),
    }});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(&obj.name_any(), &params, &Patch::Merge(&patch))
        .await
}
