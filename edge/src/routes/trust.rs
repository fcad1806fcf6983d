//! Which rules of the edge's Ingresses are trusted: only what slipway's operator writes for a Channel (the module
//! docs of [`super`] say why and how).

use std::sync::Arc;

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use kube::ResourceExt;
use slipway_crds::{Channel, names};

use super::{INGRESS_CLASS, Objects, key};

/// The API group a resource backend naming a Channel carries.
const CHANNEL_API_GROUP: &str = "slipway.dev";
/// The annotation older Ingresses name their class with.
const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// Whether the edge serves this Ingress.
pub fn is_ours(ingress: &Ingress) -> bool {
    let by_field = ingress
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref());
    let by_annotation = ingress
        .annotations()
        .get(CLASS_ANNOTATION)
        .map(String::as_str);
    by_field.or(by_annotation) == Some(INGRESS_CLASS)
}

/// A rule the edge routes: its host, the Channel whose Ingress names it, and its backend.
pub(super) struct TrustedRule<'a> {
    pub(super) host: String,
    pub(super) ingress: &'a Ingress,
    pub(super) channel: &'a Arc<Channel>,
    pub(super) backend: &'a IngressBackend,
}

/// The rules of the edge's Ingresses that slipway's operator wrote for a Channel, oldest Ingress first (then by
/// namespace and name), and the count of the other rules.
pub(super) fn trusted_rules(objects: &Objects) -> (Vec<TrustedRule<'_>>, usize) {
    let mut ingresses: Vec<&Arc<Ingress>> =
        objects.ingresses.iter().filter(|i| is_ours(i)).collect();
    ingresses.sort_by_key(|i| {
        (
            i.metadata.creation_timestamp.clone().map(|t| t.0),
            i.namespace(),
            i.name_any(),
        )
    });
    let mut trusted = Vec::new();
    let mut ignored = 0;
    for ingress in ingresses {
        let channel = ingress_channel(objects, ingress);
        for rule in ingress.spec.iter().flat_map(|s| s.rules.iter().flatten()) {
            let (Some(host), Some(http)) = (&rule.host, &rule.http) else {
                continue;
            };
            let host = host.trim_end_matches('.').to_ascii_lowercase();
            let Some(path) = http.paths.first() else {
                continue;
            };
            match channel {
                Some(channel)
                    if channel_hosts(objects, channel).any(|h| h == host)
                        && is_channels_backend(channel, &path.backend) =>
                {
                    trusted.push(TrustedRule {
                        host,
                        ingress,
                        channel,
                        backend: &path.backend,
                    });
                }
                _ => ignored += 1,
            }
        }
    }
    (trusted, ignored)
}

/// The Channel this Ingress is the operator's Ingress of: it is named like the Channel and controlled by it.
fn ingress_channel<'a>(objects: &'a Objects, ingress: &Ingress) -> Option<&'a Arc<Channel>> {
    let name = ingress.name_any();
    let owner = ingress
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    let is_channel = owner.kind == "Channel"
        && owner
            .api_version
            .starts_with(&format!("{CHANNEL_API_GROUP}/"))
        && owner.name == name;
    if !is_channel {
        return None;
    }
    let channel = objects
        .channels
        .get(&(ingress.namespace().unwrap_or_default(), name))?;
    (channel.metadata.uid.as_deref() == Some(owner.uid.as_str())).then_some(channel)
}

/// The hosts a channel may be reached at: its hostname and its verified custom domains (lowercase).
fn channel_hosts<'a>(
    objects: &'a Objects,
    channel: &'a Channel,
) -> impl Iterator<Item = String> + 'a {
    let hostname = channel
        .status
        .as_ref()
        .and_then(|s| s.hostname.as_deref())
        .map(|h| h.trim_end_matches('.').to_ascii_lowercase());
    let domains = objects
        .domains
        .get(&key(channel))
        .into_iter()
        .flatten()
        .cloned();
    hostname.into_iter().chain(domains)
}

/// Whether `backend` is what the operator points a channel's Ingress at: the Channel itself, or its Service.
fn is_channels_backend(channel: &Channel, backend: &IngressBackend) -> bool {
    let name = channel.name_any();
    match (&backend.resource, &backend.service) {
        (Some(resource), None) => {
            resource.kind == "Channel"
                && resource.api_group.as_deref() == Some(CHANNEL_API_GROUP)
                && resource.name == name
        }
        (None, Some(service)) => service.name == names::workload_name(&name),
        _ => false,
    }
}
