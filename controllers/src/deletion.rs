//! Deleting what the operator made, where an object already gone is the outcome wanted, not an error: the
//! reconcilers delete from stale reads and race garbage collection.

use kube::api::DeleteParams;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::error::Error;

/// Deletes the object `name`; a missing one is fine. Its dependents (a Deployment's pods, a Job's) go in the
/// background.
pub async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
