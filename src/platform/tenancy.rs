//! Each user's apps live in a namespace of their own, labelled with the owner and plan (the webhook reads the plan
//! for caps) and held to the `restricted` Pod Security level.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use slipway_crds::labels;
use slipway_crds::names::Username;

/// Field manager of everything the API writes.
pub const FIELD_MANAGER: &str = "slipway-api";

/// Creates or updates the user's namespace and returns its name.
pub async fn ensure_user_namespace(
    client: &Client,
    username: &Username,
    plan: &str,
) -> kube::Result<String> {
    let name = labels::user_namespace(username);
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                labels::OWNER: username.as_str(),
                labels::PLAN: plan,
                labels::MANAGED_BY: labels::MANAGER,
                "pod-security.kubernetes.io/enforce": "restricted",
            }
        }
    }))
    .map_err(kube::Error::SerdeError)?;
    Api::<Namespace>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&ns),
        )
        .await?;
    Ok(name)
}
