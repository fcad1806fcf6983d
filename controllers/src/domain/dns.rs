//! The DNS check behind verification: the TXT record at `_svc.<domain>` must carry the Domain's token, and the
//! domain must route to the platform, by a CNAME chain that reaches the channel's hostname or by an address the
//! edge answers on. Lookups go through [`Lookups`]; [`HickoryLookups`] asks a configurable resolver (the system's
//! by default) with caching off, so a retry after fixing DNS never sees the old answer.
//!
//! A name that does not exist and a name without records of the asked type are the same answer here
//! ([`Answer::Missing`]): both say the record is not set up. A lookup that could not be made (timeout, SERVFAIL,
//! refused) is [`Answer::Failed`], which the spec's table treats as transient.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use slipway_crds::{DnsRecords, DomainReason};

/// Longest CNAME chain followed.
const MAX_CHAIN: usize = 8;

/// What one lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    /// Records of the asked type.
    Found(T),
    /// The name does not exist, or has no record of that type.
    Missing,
    /// The lookup could not be made.
    Failed(String),
}

/// The lookups verification needs. Names are given without a trailing dot.
pub trait Lookups: Send + Sync {
    /// Every TXT value at `name` (each record's strings joined).
    fn txt(&self, name: &str) -> impl Future<Output = Answer<Vec<String>>> + Send;
    /// The target of a CNAME at `name`.
    fn cname(&self, name: &str) -> impl Future<Output = Answer<String>> + Send;
    /// The A and AAAA addresses of `name`.
    fn addresses(&self, name: &str) -> impl Future<Output = Answer<Vec<IpAddr>>> + Send;
}

/// Checks `domain` against `records`; `Err` names the first failure in the spec's closed set (the TXT record
/// first, then routing).
pub async fn check(
    lookups: &impl Lookups,
    domain: &str,
    records: &DnsRecords,
) -> Result<(), DomainReason> {
    match lookups.txt(&records.txt_host).await {
        Answer::Missing => return Err(DomainReason::TxtNxdomain),
        Answer::Failed(_) => return Err(DomainReason::TxtLookupFailed),
        Answer::Found(values) if !values.iter().any(|v| v.trim() == records.txt_value) => {
            return Err(DomainReason::TxtTokenMismatch);
        }
        Answer::Found(_) => {}
    }
    let target = records.cname_target.trim_end_matches('.');
    let mut name = domain.to_owned();
    let mut chained = false;
    for _ in 0..MAX_CHAIN {
        match lookups.cname(&name).await {
            Answer::Found(next) => {
                let next = next.trim_end_matches('.').to_ascii_lowercase();
                if next == target {
                    return Ok(());
                }
                chained = true;
                name = next;
            }
            Answer::Missing => break,
            Answer::Failed(_) => return Err(DomainReason::DnsLookupFailed),
        }
    }
    let found = match lookups.addresses(&name).await {
        Answer::Found(addrs) => addrs,
        Answer::Missing if chained => Vec::new(),
        Answer::Missing => return Err(DomainReason::DomainNxdomain),
        Answer::Failed(_) => return Err(DomainReason::DnsLookupFailed),
    };
    let platform = platform_addresses(lookups, records).await?;
    if found.iter().any(|a| platform.contains(a)) {
        Ok(())
    } else {
        Err(DomainReason::DnsNotPointing)
    }
}

/// The addresses the edge answers on: the configured `a_values`, else what the channel's hostname resolves to.
async fn platform_addresses(
    lookups: &impl Lookups,
    records: &DnsRecords,
) -> Result<Vec<IpAddr>, DomainReason> {
    let configured: Vec<IpAddr> = records
        .a_values
        .iter()
        .filter_map(|a| a.parse().ok())
        .collect();
    if !configured.is_empty() {
        return Ok(configured);
    }
    match lookups
        .addresses(records.cname_target.trim_end_matches('.'))
        .await
    {
        Answer::Found(addrs) if !addrs.is_empty() => Ok(addrs),
        _ => Err(DomainReason::PlatformIpUnknown),
    }
}

/// [`Lookups`] through hickory's resolver.
pub struct HickoryLookups {
    /// The resolver, or why there is none (every lookup then fails, as a lookup that could not be made).
    resolver: Result<TokioResolver, String>,
}

impl HickoryLookups {
    /// A resolver asking `server` (UDP, then TCP), or the system's resolvers when `None`. When the system's
    /// configuration cannot be read, every lookup fails with that reason (transient, so nothing is downgraded).
    pub fn new(server: Option<SocketAddr>) -> Self {
        Self {
            resolver: Self::build(server).map_err(|e| format!("no DNS resolver: {e}")),
        }
    }

    fn build(server: Option<SocketAddr>) -> anyhow::Result<TokioResolver> {
        let mut opts = ResolverOpts::default();
        opts.cache_size = 0;
        opts.timeout = Duration::from_secs(3);
        opts.attempts = 2;
        opts.ndots = 0;
        let builder = match server {
            Some(addr) => {
                let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
                for c in &mut ns.connections {
                    c.port = addr.port();
                }
                TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(vec![ns]),
                    TokioRuntimeProvider::default(),
                )
            }
            None => TokioResolver::builder_tokio()?,
        };
        Ok(builder.with_options(opts).build()?)
    }

    async fn lookup(&self, name: &str, kind: RecordType) -> Answer<Vec<RData>> {
        let resolver = match &self.resolver {
            Ok(r) => r,
            Err(e) => return Answer::Failed(e.clone()),
        };
        match resolver.lookup(format!("{name}."), kind).await {
            Ok(found) => {
                let data: Vec<RData> = found
                    .answers()
                    .iter()
                    .filter(|r| r.record_type() == kind)
                    .map(|r| r.data.clone())
                    .collect();
                if data.is_empty() {
                    Answer::Missing
                } else {
                    Answer::Found(data)
                }
            }
            Err(e) if e.is_no_records_found() || e.is_nx_domain() => Answer::Missing,
            Err(e) => Answer::Failed(e.to_string()),
        }
    }
}

fn map<T, U>(answer: Answer<T>, f: impl FnOnce(T) -> U) -> Answer<U> {
    match answer {
        Answer::Found(t) => Answer::Found(f(t)),
        Answer::Missing => Answer::Missing,
        Answer::Failed(e) => Answer::Failed(e),
    }
}

impl Lookups for HickoryLookups {
    async fn txt(&self, name: &str) -> Answer<Vec<String>> {
        map(self.lookup(name, RecordType::TXT).await, |data| {
            data.iter()
                .filter_map(|d| match d {
                    RData::TXT(txt) => Some(
                        txt.txt_data
                            .iter()
                            .map(|s| String::from_utf8_lossy(s).into_owned())
                            .collect::<String>(),
                    ),
                    _ => None,
                })
                .collect()
        })
    }

    async fn cname(&self, name: &str) -> Answer<String> {
        match self.lookup(name, RecordType::CNAME).await {
            Answer::Found(data) => data
                .iter()
                .find_map(|d| match d {
                    RData::CNAME(c) => Some(Answer::Found(c.0.to_ascii())),
                    _ => None,
                })
                .unwrap_or(Answer::Missing),
            Answer::Missing => Answer::Missing,
            Answer::Failed(e) => Answer::Failed(e),
        }
    }

    async fn addresses(&self, name: &str) -> Answer<Vec<IpAddr>> {
        let v4 = self.lookup(name, RecordType::A).await;
        let v6 = self.lookup(name, RecordType::AAAA).await;
        let addrs: Vec<IpAddr> = [&v4, &v6]
            .into_iter()
            .filter_map(|a| match a {
                Answer::Found(data) => Some(data),
                _ => None,
            })
            .flatten()
            .filter_map(|d| match d {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                _ => None,
            })
            .collect();
        match (v4, v6) {
            _ if !addrs.is_empty() => Answer::Found(addrs),
            (Answer::Failed(e), _) | (_, Answer::Failed(e)) => Answer::Failed(e),
            _ => Answer::Missing,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A zone in memory; names listed in `failing` fail every lookup.
    #[derive(Default)]
    struct Zone {
        txt: HashMap<&'static str, Vec<String>>,
        cname: HashMap<&'static str, &'static str>,
        addrs: HashMap<&'static str, Vec<IpAddr>>,
        failing: Vec<&'static str>,
    }

    impl Zone {
        fn answer<T: Clone>(&self, map: &HashMap<&'static str, T>, name: &str) -> Answer<T> {
            if self.failing.contains(&name) {
                return Answer::Failed("SERVFAIL".into());
            }
            map.get(name)
                .cloned()
                .map_or(Answer::Missing, Answer::Found)
        }
    }

    impl Lookups for Zone {
        async fn txt(&self, name: &str) -> Answer<Vec<String>> {
            self.answer(&self.txt, name)
        }
        async fn cname(&self, name: &str) -> Answer<String> {
            map(self.answer(&self.cname, name), str::to_owned)
        }
        async fn addresses(&self, name: &str) -> Answer<Vec<IpAddr>> {
            self.answer(&self.addrs, name)
        }
    }

    const TOKEN: &str = "svc-verify-0123";

    fn records(a_values: &[&str]) -> DnsRecords {
        DnsRecords {
            txt_host: "_svc.shop.example".into(),
            txt_value: TOKEN.into(),
            cname_target: "blog-alice.apps.test".into(),
            a_values: a_values.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn with_txt(value: &str) -> Zone {
        let mut z = Zone::default();
        z.txt.insert("_svc.shop.example", vec![value.to_owned()]);
        z
    }

    #[tokio::test]
    async fn the_txt_record_is_checked_first() {
        let r = records(&["192.0.2.7"]);
        let z = Zone::default();
        assert_eq!(
            check(&z, "shop.example", &r).await,
            Err(DomainReason::TxtNxdomain)
        );
        let z = with_txt("svc-verify-other");
        assert_eq!(
            check(&z, "shop.example", &r).await,
            Err(DomainReason::TxtTokenMismatch)
        );
        let mut z = with_txt(TOKEN);
        z.failing.push("_svc.shop.example");
        assert_eq!(
            check(&z, "shop.example", &r).await,
            Err(DomainReason::TxtLookupFailed)
        );
    }

    #[tokio::test]
    async fn a_cname_chain_reaching_the_channel_host_routes() {
        let r = records(&["192.0.2.7"]);
        let mut z = with_txt(TOKEN);
        z.cname.insert("shop.example", "alias.example.");
        z.cname.insert("alias.example", "Blog-Alice.apps.test.");
        assert_eq!(check(&z, "shop.example", &r).await, Ok(()));
        // A chain that ends elsewhere, without addresses, exists but does not point here.
        z.cname.insert("alias.example", "elsewhere.example");
        assert_eq!(
            check(&z, "shop.example", &r).await,
            Err(DomainReason::DnsNotPointing)
        );
    }

    #[tokio::test]
    async fn an_apex_routes_by_address() {
        let r = records(&["192.0.2.7", "2001:db8::7"]);
        let mut z = with_txt(TOKEN);
        assert_eq!(
            check(&z, "shop.example", &r).await,
            Err(DomainReason::DomainNxdomain)
        );
        z.addrs.insert("shop.example", vec![ip("198.51.100.1")]);
        assert_eq!(
            check(&z, "shop.example", &r).await,
            Err(DomainReason::DnsNotPointing)
        );
        z.addrs
            .insert("shop.example", vec![ip("198.51.100.1"), ip("2001:db8::7")]);
        assert_eq!(check(&z, "shop.example", &r).await, Ok(()));
        z.failing.push("shop.example");
        assert_eq!(
            check(&z, "shop.example", &r).await,
            Err(DomainReason::DnsLookupFailed)
        );
    }

    #[tokio::test]
    async fn without_configured_addresses_the_channel_host_tells_them() {
        let r = records(&[]);
        let mut z = with_txt(TOKEN);
        z.addrs.insert("shop.example", vec![ip("192.0.2.7")]);
        assert_eq!(
            check(&z, "shop.example", &r).await,
            Err(DomainReason::PlatformIpUnknown)
        );
        z.addrs
            .insert("blog-alice.apps.test", vec![ip("192.0.2.7")]);
        assert_eq!(check(&z, "shop.example", &r).await, Ok(()));
    }
}
