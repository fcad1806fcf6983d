//! Resolving the server's name, every A and AAAA record of it, with hickory: the system's resolver configuration,
//! or one DNS server the operator names (`--mirror-dns-server`). The name is looked up as absolute, so a pod's
//! search domains never turn `gitlab` into a name of the cluster.

use std::net::{IpAddr, SocketAddr};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ProtocolConfig, ResolverConfig,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;

/// Every address `name` resolves to, IPv4 and IPv6; an error names the host.
pub async fn addresses(name: &str, dns_server: Option<SocketAddr>) -> Result<Vec<IpAddr>, String> {
    let resolver = resolver(dns_server).map_err(|e| format!("cannot resolve {name}: {e}"))?;
    let absolute = format!("{}.", name.trim_end_matches('.'));
    let found = resolver
        .lookup_ip(absolute.as_str())
        .await
        .map_err(|e| format!("cannot resolve {name}: {e}"))?;
    let mut addrs: Vec<IpAddr> = found.iter().collect();
    addrs.dedup();
    Ok(addrs)
}

/// A resolver of its own for each sync, so no answer is cached from one sync to the next.
fn resolver(dns_server: Option<SocketAddr>) -> anyhow::Result<TokioResolver> {
    let provider = TokioRuntimeProvider::default();
    let mut builder = match dns_server {
        None => TokioResolver::builder(provider)?,
        Some(server) => {
            let connections = [ProtocolConfig::Udp, ProtocolConfig::Tcp]
                .into_iter()
                .map(|protocol| {
                    let mut c = ConnectionConfig::new(protocol);
                    c.port = server.port();
                    c
                })
                .collect();
            let config = ResolverConfig::from_name_servers(vec![NameServerConfig::new(
                server.ip(),
                true,
                connections,
            )]);
            TokioResolver::builder_with_config(config, provider)
        }
    };
    let options = builder.options_mut();
    // Both families, always: a refused address in either must be seen.
    options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    Ok(builder.build()?)
}
