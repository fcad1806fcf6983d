//! Custom domains: their canonical form and the closed set of reasons one is refused.

use super::*;

string_newtype!(
    /// A custom domain: lowercase ASCII (IDNA-encoded) labels, at least two, without a trailing dot.
    DomainName
);

/// Why a custom domain was refused: the hosting API's closed set of reasons, shared by the REST API, the webhook
/// and the reconciler so every path names the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid domain: {}: {}", self.reason(), self.explanation())]
pub enum InvalidDomain {
    /// An IPv4 or IPv6 address, not a name.
    IsIpAddress,
    /// Not valid under IDNA (UTS #46): a character no domain may hold, or an `xn--` label that does not decode.
    InvalidIdna,
    /// Longer than 253 characters, or a label longer than 63 (once IDNA-encoded).
    TooLong,
    /// An empty label, or one with characters other than letters, digits and `-`, or with `-` at an end.
    InvalidLabel,
    /// The platform's own domain or a name under it.
    PlatformDomainForbidden,
    /// A single label: a custom domain has at least two.
    NeedsDot,
}

impl InvalidDomain {
    /// The reason as the API names it.
    pub fn reason(self) -> &'static str {
        match self {
            Self::IsIpAddress => "is_ip_address",
            Self::InvalidIdna => "invalid_idna",
            Self::TooLong => "too_long",
            Self::InvalidLabel => "invalid_label",
            Self::PlatformDomainForbidden => "platform_domain_forbidden",
            Self::NeedsDot => "needs_dot",
        }
    }

    /// The API's error code: `invalid domain: <reason>`.
    pub fn code(self) -> &'static str {
        match self {
            Self::IsIpAddress => "invalid domain: is_ip_address",
            Self::InvalidIdna => "invalid domain: invalid_idna",
            Self::TooLong => "invalid domain: too_long",
            Self::InvalidLabel => "invalid domain: invalid_label",
            Self::PlatformDomainForbidden => "invalid domain: platform_domain_forbidden",
            Self::NeedsDot => "invalid domain: needs_dot",
        }
    }

    fn explanation(self) -> &'static str {
        match self {
            Self::IsIpAddress => "attach a hostname, not an IP address",
            Self::InvalidIdna => "the name is not a valid internationalized domain name",
            Self::TooLong => "a domain has at most 253 characters and each label at most 63",
            Self::InvalidLabel => {
                "labels are letters, digits and '-', not empty, not starting or ending with '-'"
            }
            Self::PlatformDomainForbidden => {
                "names under the platform's own domain cannot be attached"
            }
            Self::NeedsDot => "a domain has at least two labels, such as example.com",
        }
    }
}

impl FromStr for DomainName {
    type Err = InvalidDomain;
    /// Normalises as the API stores domains: one trailing dot dropped, IDNA-encoded (UTS #46: case-folded,
    /// Unicode labels as `xn--`), then the length and label rules.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use idna::uts46::{AsciiDenyList, DnsLength, Hyphens, Uts46};
        let trimmed = s.strip_suffix('.').unwrap_or(s);
        if is_ip_address(trimmed) {
            return Err(InvalidDomain::IsIpAddress);
        }
        // Characters outside letters, digits and '-' pass here and are refused below as label errors, so an
        // ASCII typo reads as a bad label rather than as an IDNA failure.
        let ascii = Uts46::new()
            .to_ascii(
                trimmed.as_bytes(),
                AsciiDenyList::EMPTY,
                Hyphens::Allow,
                DnsLength::Ignore,
            )
            .map_err(|_| InvalidDomain::InvalidIdna)?
            .into_owned();
        if is_ip_address(&ascii) {
            return Err(InvalidDomain::IsIpAddress);
        }
        if ascii.len() > DOMAIN_MAX_LEN || ascii.split('.').any(|l| l.len() > 63) {
            return Err(InvalidDomain::TooLong);
        }
        if !ascii.split('.').all(|l| is_dns_label(l, 63)) {
            return Err(InvalidDomain::InvalidLabel);
        }
        if !ascii.contains('.') {
            return Err(InvalidDomain::NeedsDot);
        }
        Ok(Self(ascii))
    }
}

impl DomainName {
    /// Parses a domain a user asks to attach: [`DomainName::from_str`], and not `app_domain` nor under it.
    pub fn parse_attachable(s: &str, app_domain: &str) -> Result<Self, InvalidDomain> {
        let domain: Self = s.parse()?;
        if domain.is_under(app_domain) {
            return Err(InvalidDomain::PlatformDomainForbidden);
        }
        Ok(domain)
    }

    /// Whether this is `parent` or a name under it (`parent` in any case, with or without a trailing dot).
    pub fn is_under(&self, parent: &str) -> bool {
        let parent = parent.trim_end_matches('.').to_ascii_lowercase();
        !parent.is_empty()
            && (self.0 == parent
                || self
                    .0
                    .strip_suffix(parent.as_str())
                    .is_some_and(|head| head.ends_with('.')))
    }
}

/// Whether `s` is an IPv4 or IPv6 address (bracketed or not).
fn is_ip_address(s: &str) -> bool {
    let bare = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s);
    bare.parse::<std::net::IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_are_stored_canonically() {
        for (given, stored) in [
            ("WWW.Example.COM.", "www.example.com"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("Bücher.Example", "xn--bcher-kva.example"),
            ("münchen.de.", "xn--mnchen-3ya.de"),
            ("ＥＸＡＭＰＬＥ.com", "example.com"),
        ] {
            assert_eq!(
                given.parse::<DomainName>().unwrap().as_str(),
                stored,
                "{given}"
            );
        }
    }

    #[test]
    fn every_invalid_domain_has_its_reason() {
        use InvalidDomain::*;
        let long_label = format!("{}.com", "a".repeat(64));
        let long_name = format!("{}.com", vec!["a".repeat(60); 5].join("."));
        for (given, reason) in [
            ("192.0.2.1", IsIpAddress),
            ("192.0.2.1.", IsIpAddress),
            ("2001:db8::1", IsIpAddress),
            ("[2001:db8::1]", IsIpAddress),
            ("xn--zz.example", InvalidIdna),
            ("xn--a.example", InvalidIdna),
            (long_label.as_str(), TooLong),
            (long_name.as_str(), TooLong),
            ("a..b", InvalidLabel),
            ("-a.com", InvalidLabel),
            ("a-.com", InvalidLabel),
            ("ex ample.com", InvalidLabel),
            ("under_score.com", InvalidLabel),
            ("", InvalidLabel),
            ("localhost", NeedsDot),
            ("münchen", NeedsDot),
        ] {
            assert_eq!(given.parse::<DomainName>(), Err(reason), "{given:?}");
        }
        assert_eq!(IsIpAddress.code(), "invalid domain: is_ip_address");
        assert!(
            NeedsDot
                .to_string()
                .starts_with("invalid domain: needs_dot: ")
        );
    }

    #[test]
    fn the_platform_domain_cannot_be_attached() {
        for given in ["apps.test", "Blog-Alice.Apps.Test.", "a.b.apps.test"] {
            assert_eq!(
                DomainName::parse_attachable(given, "apps.test"),
                Err(InvalidDomain::PlatformDomainForbidden),
                "{given}"
            );
        }
        for given in ["myapps.test", "apps.test.example", "test"] {
            assert_ne!(
                DomainName::parse_attachable(given, "apps.test"),
                Err(InvalidDomain::PlatformDomainForbidden),
                "{given}"
            );
        }
    }
}
