//! The owner reference every child the API writes carries from its creation: a Channel names its App; a Domain and a
//! Forward name their Channel (a Deploy names its Channel as its controller, see `deploys.rs`). Garbage collection
//! then removes a child with its parent however the parent goes (the API, kubectl, or its own parent going), so
//! nothing the API made outlives what it belonged to.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::error::ApiError;

/// The reference that makes `owner` the owner of a new child (not its controller: the operator's reconcilers are
/// the children's controllers). It blocks the owner's foreground deletion until the child is gone.
pub fn owned_by<K: Resource<DynamicType = ()>>(owner: &K) -> Result<OwnerReference, ApiError> {
    owner
        .controller_owner_ref(&())
        .map(|mut reference| {
            reference.controller = Some(false);
            reference
        })
        .ok_or_else(|| {
            ApiError::Internal(anyhow::anyhow!(
                "{} {} has no uid",
                K::kind(&()),
                owner.name_any()
            ))
        })
}
