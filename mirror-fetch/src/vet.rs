//! Which addresses a sync may connect to. A user names the server, so a name must not lead the platform to its own
//! internals (the cluster's pods, Services and nodes, loopback, the cloud metadata service) or a private network:
//! every address the name resolves to is checked, one refused address refuses them all, and the fetch then connects
//! to a checked address itself, so no second lookup can answer differently.
//!
//! Refused: unspecified, loopback, RFC 1918 private, CGNAT (100.64/10), link-local (169.254/16, where cloud
//! metadata lives; fe80::/10), multicast and broadcast, the reserved, benchmarking and documentation ranges,
//! unique-local (fc00::/7) and site-local IPv6; IPv6 forms that carry or reach an IPv4 address are judged by it
//! (IPv4-mapped and IPv4-compatible) or refused outright (NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4 2002::/16,
//! Teredo 2001::/32); and the cluster's own ranges (pod and Service ranges, node addresses). The operator's
//! allowlist is the only way to reach any of these (an on-premises forge, the tests' SSH server on loopback).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// What a sync may reach: the operator's allowlist and the networks refused on top of the fixed classes.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Reachable whatever their class.
    pub allow: Vec<IpNet>,
    /// The cluster's networks (pod and Service ranges, node addresses) and any the operator adds.
    pub deny: Vec<(IpNet, &'static str)>,
}

impl Policy {
    /// Why `ip` may not be reached, or `None` when it may.
    pub fn refusal(&self, ip: IpAddr) -> Option<String> {
        let ip = carried_v4(ip);
        if self.allow.iter().any(|n| n.contains(&ip)) {
            return None;
        }
        if let Some((net, why)) = self.deny.iter().find(|(n, _)| n.contains(&ip)) {
            return Some(format!("{ip} is in {why} {net}"));
        }
        class(ip).map(|why| format!("{ip} is {why}"))
    }

    /// Refuses the whole answer when any address is refused (a name that resolves to a public and a private
    /// address might be answered with either later); `addrs` must not be empty.
    pub fn vet(&self, host: &str, addrs: &[IpAddr]) -> Result<(), String> {
        if addrs.is_empty() {
            return Err(format!("{host} has no address"));
        }
        match addrs.iter().find_map(|ip| self.refusal(*ip)) {
            Some(why) => Err(format!(
                "refused to connect to {host}: {why}, which a mirror may not reach (the platform's allowlist, --mirror-allow-cidr, can open it)"
            )),
            None => Ok(()),
        }
    }
}

/// The IPv4 address an IPv4-mapped (`::ffff:a.b.c.d`) or IPv4-compatible (`::a.b.c.d`) address carries, so the
/// allowlist, the cluster's networks and the classes judge it as that address; any other address as it is.
fn carried_v4(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) if !v6.is_unspecified() && !v6.is_loopback() && in_v6(v6, "::/96") => {
            let [.., a, b, c, d] = v6.octets();
            IpAddr::V4(Ipv4Addr::new(a, b, c, d))
        }
        other => other,
    }
}

/// The fixed class `ip` belongs to if it is one a mirror may not reach.
pub fn class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => class_v4(ip),
        IpAddr::V6(ip) => class_v6(ip),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u8) -> bool {
    Ipv4Net::new(Ipv4Addr::from(net), prefix).is_ok_and(|n| n.contains(&ip))
}

fn class_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let classes: [([u8; 4], u8, &'static str); 16] = [
        ([0, 0, 0, 0], 8, "an unspecified (this-network) address"),
        ([10, 0, 0, 0], 8, "a private address"),
        ([100, 64, 0, 0], 10, "a shared (CGNAT) address"),
        ([127, 0, 0, 0], 8, "a loopback address"),
        (
            [169, 254, 0, 0],
            16,
            "a link-local address (where cloud metadata services answer)",
        ),
        ([172, 16, 0, 0], 12, "a private address"),
        ([192, 0, 0, 0], 24, "an IETF protocol address"),
        ([192, 0, 2, 0], 24, "a documentation address"),
        ([192, 88, 99, 0], 24, "a 6to4 relay address"),
        ([192, 168, 0, 0], 16, "a private address"),
        ([198, 18, 0, 0], 15, "a benchmarking address"),
        ([198, 51, 100, 0], 24, "a documentation address"),
        ([203, 0, 113, 0], 24, "a documentation address"),
        ([224, 0, 0, 0], 4, "a multicast address"),
        ([255, 255, 255, 255], 32, "the broadcast address"),
        ([240, 0, 0, 0], 4, "a reserved address"),
    ];
    classes
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, why)| *why)
}

fn in_v6(ip: Ipv6Addr, net: &str) -> bool {
    net.parse::<Ipv6Net>().is_ok_and(|n| n.contains(&ip))
}

fn class_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("the unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    // ::ffff:a.b.c.d reaches a.b.c.d (callers canonicalize it first; this is for a direct call), and the deprecated
    // IPv4-compatible ::a.b.c.d is read the same way.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return class_v4(v4).map(|_| "an IPv4-mapped form of a refused IPv4 address");
    }
    if in_v6(ip, "::/96") {
        let [.., a, b, c, d] = ip.octets();
        return class_v4(Ipv4Addr::new(a, b, c, d))
            .map(|_| "an IPv4-compatible form of a refused IPv4 address");
    }
    let classes: [(&str, &'static str); 10] = [
        (
            "64:ff9b::/96",
            "a NAT64 address (it can reach any IPv4 address)",
        ),
        ("64:ff9b:1::/48", "a local-use NAT64 address"),
        ("100::/64", "a discard-only address"),
        (
            "2001::/32",
            "a Teredo address (it can reach any IPv4 address)",
        ),
        ("2001:db8::/32", "a documentation address"),
        (
            "2002::/16",
            "a 6to4 address (it can reach any IPv4 address)",
        ),
        ("fc00::/7", "a unique-local address"),
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a site-local address"),
        ("ff00::/8", "a multicast address"),
    ];
    classes
        .iter()
        .find(|(net, _)| in_v6(ip, net))
        .map(|(_, why)| *why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_refused_class_is_refused() {
        for refused in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.9.9.9",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.170",
            "192.0.2.10",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "64:ff9b::808:808",
            "64:ff9b:1::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:db8::1",
            "2002:a00:1::1",
            "2002:808:808::1",
            "fc00::1",
            "fd12:3456:789a::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "100::1",
        ] {
            assert!(class(ip(refused)).is_some(), "{refused} passed");
            assert!(
                Policy::default().refusal(ip(refused)).is_some(),
                "{refused} passed the policy"
            );
        }
    }

    #[test]
    fn public_addresses_pass() {
        for public in [
            "8.8.8.8",
            "140.82.112.3",
            "100.63.255.255",
            "100.128.0.0",
            "172.32.0.1",
            "2606:4700::1111",
            "2a00:1450:4001::1",
            "::ffff:140.82.112.3",
        ] {
            assert_eq!(Policy::default().refusal(ip(public)), None, "{public}");
        }
    }

    #[test]
    fn cluster_ranges_are_refused_and_the_allowlist_opens_what_it_names() {
        let policy = Policy {
            allow: vec!["127.0.0.1/32".parse().unwrap()],
            deny: vec![
                (
                    "203.0.114.0/24".parse().unwrap(),
                    "the cluster's Service range",
                ),
                ("93.184.0.1/32".parse().unwrap(), "the node addresses"),
            ],
        };
        assert_eq!(policy.refusal(ip("127.0.0.1")), None);
        assert_eq!(
            policy.refusal(ip("::ffff:127.0.0.1")),
            None,
            "mapped forms follow their IPv4 address"
        );
        assert!(policy.refusal(ip("127.0.0.2")).is_some());
        let why = policy.refusal(ip("203.0.114.7")).unwrap();
        assert!(why.contains("Service range"), "{why}");
        assert!(policy.refusal(ip("93.184.0.1")).is_some());
        for form in ["::ffff:93.184.0.1", "::93.184.0.1", "::ffff:203.0.114.7"] {
            let why = policy.refusal(ip(form)).unwrap_or_default();
            assert!(
                why.contains("cluster") || why.contains("node"),
                "{form}: {why:?}"
            );
        }
    }

    #[test]
    fn one_refused_address_refuses_the_answer() {
        let policy = Policy::default();
        assert!(
            policy
                .vet("mixed.test", &[ip("140.82.112.3"), ip("10.0.0.5")])
                .is_err()
        );
        assert!(
            policy
                .vet("mixed.test", &[ip("2606:4700::1111"), ip("fd00::5")])
                .is_err()
        );
        assert!(policy.vet("empty.test", &[]).is_err());
        assert!(
            policy
                .vet("public.test", &[ip("140.82.112.3"), ip("2606:4700::1111")])
                .is_ok()
        );
        let err = policy
            .vet("meta.test", &[ip("169.254.169.254")])
            .unwrap_err();
        assert!(
            err.contains("169.254.169.254") && err.contains("link-local"),
            "{err}"
        );
    }
}
