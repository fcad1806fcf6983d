//! The Ingress of a channel: how traffic for its hostname reaches it. Written for IngressClass `slipway`, which
//! `slipway edge` serves; any other controller that reads Ingresses can serve the Service-backed ones too.
//!
//! A `static` channel runs no pod: its Ingress names the Channel itself as a resource backend, and the edge serves
//! the files of the channel's deployed commit. An `app` or `docker` channel points at its Service
//! ([`names::workload_name`]) on the port named `http`. The Ingress is owned by the Channel, so it goes with it.
//!
//! Each verified custom domain of the channel is one more rule with the same backend; a domain that is not (or no
//! longer) verified has none, so it has no route. The rules carry no `tls` entries: a domain's certificate lives in
//! the platform's namespace, which an Ingress cannot name, and `slipway edge` finds it there by the host.

use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use slipway_crds::app::Template;
use slipway_crds::{App, Channel, labels, names};

use crate::context::{Context, FIELD_MANAGER};
use crate::error::Error;

use slipway_crds::labels::INGRESS_CLASS;
/// The controller name of that IngressClass (`spec.controller`).
pub const INGRESS_CONTROLLER: &str = "slipway.dev/edge";
/// Name of the Service port a dynamic channel's Ingress targets.
pub const HTTP_PORT_NAME: &str = "http";

/// The Ingress `channel` should have, for its App's template, its hostname and its verified custom domains. Pure,
/// so it is tested from fixtures.
pub fn build(
    channel: &Channel,
    app: &App,
    hostname: &str,
    domains: &[String],
) -> Result<Ingress, Error> {
    let name = channel.name_any();
    let owner = channel
        .controller_owner_ref(&())
        .ok_or(Error::Incomplete("uid"))?;
    let backend = match app.spec.template {
        Template::Static => json!({"resource": {
            "apiGroup": "slipway.dev", "kind": "Channel", "name": name,
        }}),
        Template::App | Template::Docker => json!({"service": {
            "name": names::workload_name(&name), "port": {"name": HTTP_PORT_NAME},
        }}),
    };
    let ingress = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": name,
            "namespace": channel.namespace(),
            "labels": {
                labels::APP: channel.spec.app,
                labels::CHANNEL: channel.channel_name(),
                labels::MANAGED_BY: labels::MANAGER,
            },
            "ownerReferences": [owner],
        },
        "spec": {
            "ingressClassName": INGRESS_CLASS,
            "rules": std::iter::once(hostname)
                .chain(domains.iter().map(String::as_str))
                .map(|host| json!({
                    "host": host,
                    "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]},
                }))
                .collect::<Vec<_>>(),
        },
    });
    serde_json::from_value(ingress).map_err(|e| Error::InvalidSpec(format!("ingress: {e}")))
}

/// Applies the channel's Ingress with server-side apply, unless the cached Ingress already has it (the apply
/// would be a no-op, but one the apiserver works out in full).
pub async fn apply(
    ctx: &Context,
    channel: &Channel,
    app: &App,
    hostname: &str,
) -> Result<(), Error> {
    let domains = crate::caches::verified_domains(ctx, channel).await?;
    let ingress = build(channel, app, hostname, &domains)?;
    if crate::caches::ingress_is_current(ctx, &ingress).await {
        return Ok(());
    }
    let namespace = channel.namespace().ok_or(Error::Incomplete("namespace"))?;
    let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), &namespace);
    api.patch(
        &channel.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&ingress),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        serde_yaml::from_str(yaml).unwrap()
    }

    const CHANNEL: &str = "
apiVersion: slipway.dev/v1alpha1
kind: Channel
metadata: {name: blog.next, namespace: slipway-user-alice, uid: 8d1c3c1e-0000-4000-8000-0000000000c1}
spec: {app: blog, gitRefBinding: 'branch:next'}
";

    fn app(template: &str) -> App {
        fixture(&format!(
            "
apiVersion: slipway.dev/v1alpha1
kind: App
metadata: {{name: blog, namespace: slipway-user-alice, uid: 8d1c3c1e-0000-4000-8000-000000000001}}
spec: {{owner: alice, template: {template}}}
"
        ))
    }

    fn rule_backend(ingress: &Ingress) -> serde_json::Value {
        let value = serde_json::to_value(ingress).unwrap();
        value["spec"]["rules"][0]["http"]["paths"][0]["backend"].clone()
    }

    #[test]
    fn a_static_channel_is_served_by_the_edge_from_the_channel_itself() {
        let channel: Channel = fixture(CHANNEL);
        let ingress = build(&channel, &app("static"), "next-blog-alice.apps.test", &[]).unwrap();
        let spec = ingress.spec.as_ref().unwrap();
        assert_eq!(spec.ingress_class_name.as_deref(), Some("slipway"));
        let rules = spec.rules.as_ref().unwrap();
        assert_eq!(rules[0].host.as_deref(), Some("next-blog-alice.apps.test"));
        assert_eq!(
            rule_backend(&ingress),
            json!({"resource": {"apiGroup": "slipway.dev", "kind": "Channel", "name": "blog.next"}})
        );
    }

    #[test]
    fn a_dynamic_channel_points_at_its_service_port_named_http() {
        let channel: Channel = fixture(CHANNEL);
        for template in ["app", "docker"] {
            let ingress =
                build(&channel, &app(template), "next-blog-alice.apps.test", &[]).unwrap();
            assert_eq!(
                rule_backend(&ingress),
                json!({"service": {"name": "blog-next", "port": {"name": "http"}}})
            );
        }
    }

    #[test]
    fn verified_domains_are_rules_with_the_same_backend() {
        let channel: Channel = fixture(CHANNEL);
        let domains = vec!["shop.example".to_owned(), "www.shop.example".to_owned()];
        let ingress = build(&channel, &app("app"), "next-blog-alice.apps.test", &domains).unwrap();
        let value = serde_json::to_value(&ingress).unwrap();
        let rules = value["spec"]["rules"].as_array().unwrap();
        let hosts: Vec<&str> = rules.iter().map(|r| r["host"].as_str().unwrap()).collect();
        assert_eq!(
            hosts,
            [
                "next-blog-alice.apps.test",
                "shop.example",
                "www.shop.example"
            ]
        );
        assert!(
            rules
                .iter()
                .all(|r| r["http"]["paths"][0]["backend"] == rule_backend(&ingress))
        );
        assert!(value["spec"].get("tls").is_none());
    }

    #[test]
    fn the_ingress_belongs_to_the_channel_and_carries_its_labels() {
        let channel: Channel = fixture(CHANNEL);
        let ingress = build(&channel, &app("static"), "h.apps.test", &[]).unwrap();
        let owner = &ingress.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.controller),
            ("Channel", "blog.next", Some(true))
        );
        let labels = ingress.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["slipway.dev/app"], "blog");
        assert_eq!(labels["slipway.dev/channel"], "next");
        assert_eq!(ingress.metadata.name.as_deref(), Some("blog.next"));
    }
}
