//! The cluster's own networks, read from the cluster at each sync (nodes come and go): every node's addresses and
//! pod ranges, and the Service ranges (`ServiceCIDR` objects). A sync refuses them like a private address. When
//! they cannot be read the sync fails rather than guess; a cluster without the `ServiceCIDR` API (before
//! Kubernetes 1.33) names its Service range with `--mirror-deny-cidr` instead.

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::Api;
use kube::api::ListParams;

/// Why a network is refused, as a refusal names it.
pub const NODE_ADDRESS: &str = "the cluster's node addresses";
/// See [`NODE_ADDRESS`].
pub const POD_RANGE: &str = "the cluster's pod range";
/// See [`NODE_ADDRESS`].
pub const SERVICE_RANGE: &str = "the cluster's Service range";

/// The cluster's networks, each with why it is refused.
pub async fn networks(kube: &kube::Client) -> anyhow::Result<Vec<(IpNet, &'static str)>> {
    let mut nets = Vec::new();
    let nodes = Api::<Node>::all(kube.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("could not list the cluster's nodes: {e}"))?;
    for node in nodes {
        let status = node.status.unwrap_or_default();
        for address in status.addresses.unwrap_or_default() {
            if let Ok(ip) = address.address.parse::<std::net::IpAddr>() {
                nets.push((IpNet::from(ip), NODE_ADDRESS));
            }
        }
        let spec = node.spec.unwrap_or_default();
        for cidr in spec
            .pod_cidrs
            .unwrap_or_default()
            .iter()
            .chain(&spec.pod_cidr)
        {
            if let Ok(net) = cidr.parse() {
                nets.push((net, POD_RANGE));
            }
        }
    }
    match Api::<ServiceCIDR>::all(kube.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(ranges) => {
            for range in ranges {
                for cidr in range.spec.and_then(|s| s.cidrs).unwrap_or_default() {
                    if let Ok(net) = cidr.parse() {
                        nets.push((net, SERVICE_RANGE));
                    }
                }
            }
        }
        // No ServiceCIDR API on this cluster: --mirror-deny-cidr carries the range.
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => anyhow::bail!("could not list the cluster's Service ranges: {e}"),
    }
    Ok(nets)
}
