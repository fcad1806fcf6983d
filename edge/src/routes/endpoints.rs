//! Where a trusted rule sends its host: a static site's commit, or the ready endpoints of the channel's Service.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::networking::v1::IngressBackend;
use slipway_crds::{Channel, ReadyBy};

use super::{Objects, Target, Upstreams};
use crate::site::SiteKey;

/// How a trusted rule's host is served: a static channel's commit, a dynamic channel's ready endpoints, or the
/// answer for a channel that has neither.
pub(super) fn backend_target(
    objects: &Objects,
    channel: &Channel,
    namespace: &str,
    backend: &IngressBackend,
) -> Target {
    if backend.resource.is_some() {
        return static_target(objects, namespace, channel);
    }
    if channel.status.as_ref().and_then(|s| s.ready_by) == Some(ReadyBy::File) {
        return Target::ReadyFile;
    }
    let Some(service) = &backend.service else {
        return Target::NoEndpoints;
    };
    let port = service.port.as_ref();
    let addrs = service_endpoints(
        objects,
        namespace,
        &service.name,
        port.and_then(|p| p.name.as_deref()),
        port.and_then(|p| p.number),
    );
    if addrs.is_empty() {
        Target::NoEndpoints
    } else {
        Target::Proxy(Upstreams::new(addrs))
    }
}

fn static_target(objects: &Objects, namespace: &str, channel: &Channel) -> Target {
    let app = objects
        .apps
        .get(&(namespace.to_owned(), channel.spec.app.clone()));
    let app_id = app.and_then(|a| a.metadata.uid.clone());
    let sha = channel.status.as_ref().and_then(|s| s.current_sha.clone());
    match (app_id, sha) {
        (Some(app_id), Some(sha)) => Target::Static(SiteKey { app_id, sha }),
        _ => Target::NotDeployed,
    }
}

/// Ready endpoints of the port named `port_name` of the Service `service` in `namespace`.
pub fn named_port_endpoints(
    objects: &Objects,
    namespace: &str,
    service: &str,
    port_name: &str,
) -> Vec<SocketAddr> {
    service_endpoints(objects, namespace, service, Some(port_name), None)
}

/// Ready endpoints of the Service port named `port_name` (or numbered `port_number`).
fn service_endpoints(
    objects: &Objects,
    namespace: &str,
    service: &str,
    port_name: Option<&str>,
    port_number: Option<i32>,
) -> Vec<SocketAddr> {
    let key = (namespace.to_owned(), service.to_owned());
    let Some(svc) = objects.services.get(&key) else {
        return Vec::new();
    };
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let Some(svc_port) = ports.iter().find(|p| match (port_name, port_number) {
        (Some(name), _) => p.name.as_deref() == Some(name),
        (None, Some(number)) => p.port == number,
        (None, None) => ports.len() == 1,
    }) else {
        return Vec::new();
    };
    let wanted = svc_port.name.clone().unwrap_or_default();
    let mut addrs = Vec::new();
    for slice in objects.slices.get(&key).into_iter().flatten() {
        if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
            continue;
        }
        let Some(port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.clone().unwrap_or_default() == wanted)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            addrs.extend(
                endpoint
                    .addresses
                    .iter()
                    .filter_map(|a| a.parse::<IpAddr>().ok())
                    .map(|ip| SocketAddr::new(ip, port)),
            );
        }
    }
    addrs
}

/// What a host's route should be now, given what the objects say (`wanted`), the route it has (`current`) and
/// whether a site is in the cache. A host always serves one whole commit; when a deploy moves a static host to a
/// new commit:
/// - the new commit is cached: the host moves at once;
/// - the old one is cached (the channel is hot): the host keeps serving it and the new commit is loaded now (the
///   second value), the host moving once it is in, so no visitor waits for the deploy's load;
/// - neither (the channel is cold): the host moves at once, and its next request loads the new commit, as it would
///   have loaded the old one. Nothing is loaded for a host nobody asks for.
pub fn settle(
    wanted: Target,
    current: Option<&Target>,
    cached: impl Fn(&SiteKey) -> bool,
) -> (Target, Option<SiteKey>) {
    let Target::Static(site) = &wanted else {
        return (wanted, None);
    };
    match current {
        Some(Target::Static(old)) if old != site && !cached(site) && cached(old) => {
            (Target::Static(old.clone()), Some(site.clone()))
        }
        _ => (wanted, None),
    }
}
