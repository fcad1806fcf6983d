//! Networks in CIDR notation: the allowlists of raw TCP forwards.

use super::*;

/// A network in CIDR notation, IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The address as written (host bits may be set, as `isCIDR` in CEL allows).
    pub addr: std::net::IpAddr,
    /// The prefix length.
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = InvalidName(messages::CIDR);
        let (addr, prefix) = s.split_once('/').ok_or(err.clone())?;
        let addr: std::net::IpAddr = addr.parse().map_err(|_| err.clone())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let digits_ok =
            !prefix.is_empty() && prefix.len() <= 3 && prefix.bytes().all(|b| b.is_ascii_digit());
        let leading_zero = prefix.len() > 1 && prefix.starts_with('0');
        let prefix: u8 = prefix.parse().map_err(|_| err.clone())?;
        if !digits_ok || leading_zero || prefix > max || s.len() > CIDR_MAX_LEN {
            return Err(err);
        }
        Ok(Self { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Parses an allowlist: at most [`crate::forward::MAX_ALLOW_CIDRS`] CIDRs.
pub fn parse_allow_cidrs<S: AsRef<str>>(cidrs: &[S]) -> Result<Vec<Cidr>, InvalidName> {
    if cidrs.len() > crate::forward::MAX_ALLOW_CIDRS {
        return Err(InvalidName(messages::TOO_MANY_CIDRS));
    }
    cidrs.iter().map(|c| c.as_ref().parse()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_both_families() {
        assert_eq!("10.0.0.0/8".parse::<Cidr>().unwrap().prefix, 8);
        assert!("2001:db8::/32".parse::<Cidr>().is_ok());
        assert!("0.0.0.0/0".parse::<Cidr>().is_ok());
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "x/1",
            "10.0.0.0/08",
            "10.0.0.0/+8",
            "/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        let many: Vec<String> = (0..17).map(|i| format!("10.0.{i}.0/24")).collect();
        assert_eq!(
            parse_allow_cidrs(&many),
            Err(InvalidName(messages::TOO_MANY_CIDRS))
        );
        assert_eq!(parse_allow_cidrs(&many[..16]).unwrap().len(), 16);
    }
}
