//! Whether a channel's route has moved to a new version: every ready endpoint in its Service's EndpointSlices is
//! a pod of that version's Deployment, and there is one. The edge routes from these EndpointSlices, so until they
//! say so the edge may still send a request to the old version, and the old version must keep serving; once they
//! do, the old version only has to outlast the edge's own watch of them (its drain, [`super::objects::DRAIN_SECONDS`]).
//!
//! The endpoint controller rewrites the slices a moment after the Service's selector changes; on a loaded node
//! that moment can be longer than the drain, which is why [`super::promote`] waits for the slices rather than
//! stopping the old version as soon as the selector is written.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::ListParams;

use super::Names;
use crate::context::Context;
use crate::error::Error;

/// The label EndpointSlices carry naming their Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Whether the Service `names.service` routes only to pods of `names.deployment`, and to at least one.
pub(super) async fn serves_only(ctx: &Context, names: &Names) -> Result<bool, Error> {
    let slices: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let selector = format!("{SERVICE_NAME_LABEL}={}", names.service);
    let listed = slices
        .list(&ListParams::default().labels(&selector))
        .await?;
    Ok(only_pods_of(&listed.items, &names.deployment))
}

/// Whether the ready endpoints of `slices` are all pods of the Deployment `deployment` (whose pods' names start
/// with `<deployment>-`), and there is one.
fn only_pods_of(slices: &[EndpointSlice], deployment: &str) -> bool {
    let prefix = format!("{deployment}-");
    let mut ready = slices
        .iter()
        .flat_map(|slice| slice.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
        .peekable();
    ready.peek().is_some()
        && ready.all(|e| {
            e.target_ref
                .as_ref()
                .and_then(|r| r.name.as_deref())
                .is_some_and(|pod| pod.starts_with(&prefix))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "web-x", "labels": {SERVICE_NAME_LABEL: "web"}},
            "addressType": "IPv4",
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    fn endpoint(pod: &str, ready: bool) -> serde_json::Value {
        json!({
            "addresses": ["10.0.0.1"],
            "conditions": {"ready": ready},
            "targetRef": {"kind": "Pod", "name": pod},
        })
    }

    #[test]
    fn the_route_has_moved_only_when_every_ready_endpoint_is_the_new_version() {
        let new = "web-1a2b3c4d";
        // Just after the selector changed: the slice still lists the old version's pod.
        let stale = slice(json!([endpoint("web-99887766-abcde-x1", true)]));
        assert!(!only_pods_of(&[stale], new));
        let both = slice(json!([
            endpoint("web-99887766-abcde-x1", true),
            endpoint("web-1a2b3c4d-fghij-y2", true),
        ]));
        assert!(!only_pods_of(&[both], new));
        // An old pod listed as not ready receives nothing from the edge.
        let leaving = slice(json!([
            endpoint("web-99887766-abcde-x1", false),
            endpoint("web-1a2b3c4d-fghij-y2", true),
        ]));
        assert!(only_pods_of(&[leaving], new));
        // Spread over two slices.
        let (a, b) = (
            slice(json!([endpoint("web-1a2b3c4d-fghij-y2", true)])),
            slice(json!([endpoint("web-99887766-abcde-x1", true)])),
        );
        assert!(!only_pods_of(&[a.clone(), b], new));
        assert!(only_pods_of(&[a], new));
    }

    #[test]
    fn a_route_with_no_ready_endpoint_has_not_moved() {
        let new = "web-1a2b3c4d";
        assert!(!only_pods_of(&[], new));
        assert!(!only_pods_of(&[slice(json!([]))], new));
        assert!(!only_pods_of(
            &[slice(json!([endpoint("web-1a2b3c4d-fghij-y2", false)]))],
            new
        ));
        // An endpoint naming no pod is not the new version's.
        let unnamed = slice(json!([{"addresses": ["10.0.0.2"], "conditions": {"ready": true}}]));
        assert!(!only_pods_of(&[unnamed], new));
    }
}
