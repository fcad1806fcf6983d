//! Domain admission: a valid hostname outside the platform's own domain, attached to a channel that exists, held
//! by no other Domain on the platform, and within the per-channel limit: the REST API's rules, so a Domain written
//! with kubectl is held to them too. A Domain's spec cannot change, so only creation is checked.
//!
//! Domains on their way out (a deletion timestamp, a finalizer still running) hold nothing. The caches answer
//! first; a refusal is given only when a consistent read of the apiserver refuses too, because a cache may not
//! have seen a deletion yet, and once a detach has been answered its name is free on every replica.

use std::sync::Arc;

use slipway_crds::Domain;
use slipway_crds::names::DomainName;

use super::{Refusal, Review, require_channel};
use crate::lookup::{Lookup, is_live, is_object};
use slipway_crds::rules::{self, Denial};

/// Checks a new Domain.
pub async fn validate<L: Lookup>(lookup: &L, review: &Review<Domain>) -> Result<(), Refusal> {
    if !review.is_create() {
        return Ok(());
    }
    let ns = review.namespace.as_str();
    let domain = match lookup.app_domain() {
        Some(app_domain) => DomainName::parse_attachable(&review.object.spec.domain, app_domain)?,
        None => review.object.spec.domain.parse()?,
    };
    let channel = review.object.spec.channel.as_str();
    require_channel(lookup, ns, channel).await?;

    let new = NewDomain {
        domain: &domain,
        ns,
        name: &review.name,
        channel,
    };
    if new.judge(&lookup.domains()).is_ok() {
        return Ok(());
    }
    let read = lookup.read_domains(domain.as_str(), ns, channel).await?;
    Ok(new.judge(&read)?)
}

/// The Domain under review.
struct NewDomain<'a> {
    domain: &'a DomainName,
    ns: &'a str,
    name: &'a str,
    channel: &'a str,
}

impl NewDomain<'_> {
    /// The rules over `domains` (any Domains of the platform; those being deleted and the one under review are
    /// left out).
    fn judge(&self, domains: &[Arc<Domain>]) -> Result<(), Denial> {
        let others: Vec<_> = domains
            .iter()
            .filter(|d| is_live(d.as_ref()) && !is_object(d.as_ref(), self.ns, self.name))
            .collect();
        let attached: Vec<String> = others
            .iter()
            .map(|d| match d.spec.domain.parse::<DomainName>() {
                Ok(name) => name.to_string(),
                Err(_) => d.spec.domain.to_ascii_lowercase(),
            })
            .collect();
        rules::domain_free(self.domain, attached.iter().map(String::as_str))?;
        let on_channel = others
            .iter()
            .filter(|d| {
                d.metadata.namespace.as_deref() == Some(self.ns) && d.spec.channel == self.channel
            })
            .count();
        rules::within_domain_limit(on_channel)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::validate::fixtures::*;
    use slipway_crds::rules::DenialKind;

    #[tokio::test]
    async fn a_free_domain_on_an_existing_channel_is_admitted() {
        let s = cluster("ns", &[]);
        assert!(
            validate(&s, &create(domain("ns", "blog.prod", "www.example.com")))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn the_hostname_is_parsed_with_the_api_rules() {
        let s = cluster("ns", &[]);
        let msg = denied(
            validate(&s, &create(domain("ns", "blog.prod", "localhost"))).await,
            DenialKind::Invalid,
        );
        assert!(msg.starts_with("invalid domain: needs_dot: "), "{msg}");
    }

    #[tokio::test]
    async fn the_platform_domain_is_refused_when_known() {
        let mut s = cluster("ns", &[]);
        let review = create(domain("ns", "blog.prod", "shop.apps.test"));
        assert!(validate(&s, &review).await.is_ok());
        s.app_domain = Some("apps.test".into());
        let msg = denied(validate(&s, &review).await, DenialKind::Invalid);
        assert!(
            msg.starts_with("invalid domain: platform_domain_forbidden: "),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn the_channel_must_exist() {
        let s = cluster("ns", &[]);
        let msg = denied(
            validate(&s, &create(domain("ns", "blog.next", "www.example.com"))).await,
            DenialKind::Missing,
        );
        assert_eq!(msg, "channel blog.next does not exist in namespace ns");
    }

    #[tokio::test]
    async fn a_domain_is_unique_platform_wide() {
        let mut s = cluster("ns1", &[]);
        s.domains
            .push(Arc::new(domain("ns2", "shop.prod", "www.example.com")));
        let msg = denied(
            validate(&s, &create(domain("ns1", "blog.prod", "www.example.com"))).await,
            DenialKind::Taken,
        );
        assert_eq!(
            msg,
            "the domain www.example.com is already attached to another channel"
        );
        // A domain on its way out can be attached elsewhere.
        s.domains = vec![Arc::new(deleting(domain(
            "ns2",
            "shop.prod",
            "www.example.com",
        )))];
        assert!(
            validate(&s, &create(domain("ns1", "blog.prod", "www.example.com")))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_refusal_of_the_caches_is_given_only_when_a_consistent_read_agrees() {
        let mut s = cluster("ns1", &[]);
        // The caches still show a Domain another namespace deleted a moment ago, and a fifth one of this channel.
        s.domains = vec![Arc::new(domain("ns2", "shop.prod", "www.example.com"))];
        s.domains.extend(
            (0..5).map(|i| Arc::new(domain("ns1", "blog.prod", &format!("d{i}.example.com")))),
        );
        s.read_domains = Some(s.domains[1..5].to_vec());
        for name in ["www.example.com", "d9.example.com"] {
            assert!(
                validate(&s, &create(domain("ns1", "blog.prod", name)))
                    .await
                    .is_ok(),
                "{name}"
            );
        }
        // What the read shows still counts: the name held elsewhere, the channel at its limit.
        s.read_domains = Some(s.domains.clone());
        denied(
            validate(&s, &create(domain("ns1", "blog.prod", "www.example.com"))).await,
            DenialKind::Taken,
        );
        denied(
            validate(&s, &create(domain("ns1", "blog.prod", "d9.example.com"))).await,
            DenialKind::LimitReached,
        );
    }

    #[tokio::test]
    async fn a_channel_has_at_most_five_domains() {
        let mut s = cluster("ns", &[]);
        for i in 0..4 {
            s.domains.push(Arc::new(domain(
                "ns",
                "blog.prod",
                &format!("d{i}.example.com"),
            )));
        }
        // Domains of another channel do not count.
        s.domains
            .push(Arc::new(domain("ns", "blog.next", "other.example.com")));
        assert!(
            validate(&s, &create(domain("ns", "blog.prod", "d4.example.com")))
                .await
                .is_ok()
        );
        s.domains
            .push(Arc::new(domain("ns", "blog.prod", "d4.example.com")));
        let msg = denied(
            validate(&s, &create(domain("ns", "blog.prod", "d5.example.com"))).await,
            DenialKind::LimitReached,
        );
        assert!(
            msg.starts_with("a channel has at most 5 custom domains"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn updates_are_admitted() {
        let s = Default::default();
        let d = domain("ns", "gone.prod", "www.example.com");
        assert!(
            validate::<crate::lookup::Snapshot>(&s, &update(d.clone(), d))
                .await
                .is_ok()
        );
    }
}
